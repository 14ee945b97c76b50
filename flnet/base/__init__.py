"""The bottom layer's helpers that are neither schema nor maths: reading user files safely."""
