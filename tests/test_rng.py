"""Random streams: keyed by (seed, stream, keys), independent of every other draw."""

import numpy as np

from flnet.rng import Stream, generator, minibatch_generator
from flnet.scenario import RunConfig


def draws(g, n=8):
    return g.integers(0, 2**31, n)


def test_same_key_same_numbers_whatever_was_drawn_before():
    a = generator(3, Stream.FADING, 5, 2)
    draws(generator(3, Stream.SELECTION, 5), 1000)  # another stream in between
    assert np.array_equal(draws(a), draws(generator(3, Stream.FADING, 5, 2)))


def test_every_part_of_the_key_matters():
    base = draws(generator(3, Stream.FADING, 5, 2))
    for other in (
        generator(4, Stream.FADING, 5, 2),
        generator(3, Stream.RADIO, 5, 2),
        generator(3, Stream.FADING, 6, 2),
        generator(3, Stream.FADING, 5, 3),
        generator(3, Stream.FADING, 5),
    ):
        assert not np.array_equal(base, draws(other))


def test_minibatch_keys_are_the_w1_convention():
    assert np.array_equal(
        draws(minibatch_generator(0, 4, 9)), draws(np.random.default_rng([0, 4, 9]))
    )


def test_stream_tags_are_distinct_and_above_every_round_the_schema_allows():
    """A stream key [seed, tag, k] and a minibatch key [seed, round, client] never meet."""
    tags = [int(s) for s in Stream]
    assert len(set(tags)) == len(tags)
    max_rounds = next(m.le for m in RunConfig.model_fields["rounds"].metadata if hasattr(m, "le"))
    assert max_rounds < min(tags)


def test_a_trailing_zero_key_is_the_shorter_key_so_each_stream_keeps_one_key_length():
    """numpy's SeedSequence drops trailing zero words: the hazard rng.py's rule guards against."""
    assert np.array_equal(
        draws(generator(3, Stream.FADING, 5)), draws(generator(3, Stream.FADING, 5, 0))
    )
