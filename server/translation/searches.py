"""Which search decodes a job: greedy, sampled or beam search (``search``), or, for a row with
glossary terms, their constrained forms (``constraints``, ``constrained_beam``), which subclass them."""

from __future__ import annotations

import numpy as np

from .constrained_beam import ConstrainedBeamSearch
from .constraints import GuidedSearch
from .options import DecodeOptions
from .search import Argmax, BeamSearch, Sampler, Search, SingleSearch
from .terms import constraints_growth


def make_search(options: DecodeOptions, max_new_tokens: int, eos_id: int) -> Search:
    """The search ``options`` ask for: beam search, sampling (seeded per job) or greedy."""
    prefix = tuple(options.prefix_ids)
    if options.constraints:  # glossary terms: the constrained searches
        return _constrained_search(options, max_new_tokens, eos_id)
    if options.beam_size > 1:
        return BeamSearch(
            options.beam_size,
            max_new_tokens,
            options.length_penalty,
            options.num_hypotheses,
            eos_id,
            prefix,
            options.hide_prefix,
        )
    chooser = _chooser(options)
    return SingleSearch(chooser, eos_id, max_new_tokens, prefix, options.return_scores, options.hide_prefix)


def _constrained_search(options: DecodeOptions, max_new_tokens: int, eos_id: int) -> Search:
    prefix, terms = tuple(options.prefix_ids), options.constraints
    # terms written through surrogates may make the output longer once swapped (term_swap.py)
    limit = max_new_tokens - constraints_growth(terms)
    if options.beam_size > 1:
        o = options
        return ConstrainedBeamSearch(
            o.beam_size, limit, o.length_penalty, o.num_hypotheses, eos_id, terms, prefix, o.hide_prefix
        )
    chooser = _chooser(options)
    return GuidedSearch(chooser, eos_id, limit, terms, prefix, options.return_scores, options.hide_prefix)


def _chooser(options: DecodeOptions) -> Argmax | Sampler:
    if options.sampling:
        return Sampler(options.temperature, options.top_k, options.top_p, np.random.default_rng(options.seed))
    return Argmax()
