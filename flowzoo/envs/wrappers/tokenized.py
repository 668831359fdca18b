"""A tokenised view: text observations become fixed-length integer arrays (and integer
arrays become text actions) through a given tokenizer, for numeric-space libraries."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from flowzoo.envs.options import Opt, short_repr
from flowzoo.envs.spaces import replace_surrogates


def _check_text_env(env: object) -> None:
    """A TypeError unless ``env`` is a Gymnasium env whose observation is a ``Dict`` with a
    text ``"prompt"`` and whose action is text (a single-agent view of a workflow env)."""
    obs = getattr(env, "observation_space", None)
    if not (
        isinstance(env, gym.Env)
        and isinstance(obs, spaces.Dict)
        and "prompt" in obs.spaces
        and isinstance(env.action_space, spaces.Text)
    ):
        raise TypeError(
            f"TokenizedView: env={short_repr(env)} has type {type(env).__name__}; env must be a "
            "gymnasium.Env with a Dict observation holding a text 'prompt' and a text action "
            "(e.g. flowzoo.envs.wrappers.single_agent(...))"
        )


#: the longest observation or action a view may declare (its spaces are built eagerly)
MAX_TOKENS = 1 << 20
#: the largest vocabulary (ids are int64; beyond 2^31 no tokenizer exists)
MAX_VOCAB = (1 << 31) - 1

_ARGS = {
    o.name: o
    for o in (
        Opt("max_len", "int", "observation length in tokens", lo=1, hi=MAX_TOKENS),
        Opt("max_action_len", "int", "action length in tokens", lo=1, hi=MAX_TOKENS),
        Opt("vocab_size", "int", "token ids are 0..vocab_size-1", lo=1, hi=MAX_VOCAB,
            nullable=True),
        Opt("pad_id", "int", "the id that pads observations (and is dropped from actions)",
            lo=0, hi=MAX_VOCAB - 1, nullable=True),
    )
}  # fmt: skip


class TokenizedView(gym.Wrapper):
    """Wrap a single-agent text env: obs -> ``Box(int64, (max_len,))`` of token ids (left
    truncated, right padded with ``pad_id``); action ``MultiDiscrete([vocab] * max_action_len)``
    -> text via ``decode``. ``info`` gets ``obs_truncated``, ``obs_length`` and
    ``obs_surrogate_replaced`` (the prompt held surrogate code points, which no tokenizer
    takes: repaired as the engine repairs actions, a pair joined, a lone one U+FFFD).

    ``tokenizer`` is a Hugging Face tokenizer (``vocab_size`` defaults to its length,
    ``pad_id`` to its pad token, else 0), or pass ``encode``/``decode`` callables and
    ``vocab_size``. Every argument is checked here: a bool, float or str where an int is
    meant, a length < 1, a ``pad_id`` outside ``0..vocab_size-1`` is an error naming it."""

    def __init__(
        self,
        env: gym.Env,
        tokenizer=None,
        max_len: int = 512,
        max_action_len: int = 64,
        vocab_size: int | None = None,
        encode: Callable[[str], list[int]] | None = None,
        decode: Callable[[list[int]], str] | None = None,
        pad_id: int | None = None,
    ) -> None:
        v = {
            k: o.validate(val, "TokenizedView: ")
            for (k, o), val in zip(
                _ARGS.items(), (max_len, max_action_len, vocab_size, pad_id), strict=True
            )
        }
        _check_text_env(env)
        for name, fn in (("encode", encode), ("decode", decode)):
            if fn is not None and not callable(fn):
                raise TypeError(
                    f"TokenizedView: {name}={fn!r} has type {type(fn).__name__}; {name} must "
                    "be a callable or None"
                )
        if tokenizer is not None:
            if not (callable(tokenizer) and callable(getattr(tokenizer, "decode", None))):
                raise TypeError(
                    f"TokenizedView: tokenizer={tokenizer!r} has type "
                    f"{type(tokenizer).__name__}; tokenizer must be a Hugging Face tokenizer "
                    "(callable, with decode and len) or None"
                )
            n = len(tokenizer)
            if v["vocab_size"] is None:
                v["vocab_size"] = n
            elif v["vocab_size"] < n:
                raise ValueError(
                    f"TokenizedView: vocab_size={v['vocab_size']} is smaller than the "
                    f"tokenizer's {n} ids; vocab_size must be >= {n} or None"
                )
            if v["pad_id"] is None:
                v["pad_id"] = _ARGS["pad_id"].validate(getattr(tokenizer, "pad_token_id", None))
            encode = encode or (lambda s: tokenizer(s, add_special_tokens=False)["input_ids"])
            decode = decode or (lambda ids: tokenizer.decode(ids, skip_special_tokens=True))
        if encode is None or decode is None or v["vocab_size"] is None:
            missing = [k for k, x in (("encode", encode), ("decode", decode)) if x is None]
            missing += ["vocab_size"] if v["vocab_size"] is None else []
            raise ValueError(
                f"TokenizedView: {', '.join(missing)} missing; give a tokenizer, or encode, "
                "decode and vocab_size"
            )
        vocab = v["vocab_size"]
        pad = 0 if v["pad_id"] is None else v["pad_id"]
        if pad >= vocab:
            raise ValueError(
                f"TokenizedView: pad_id={pad} is out of range; pad_id must be an int in "
                f"[0, {vocab - 1}] (vocab_size={vocab})"
            )
        super().__init__(env)
        self._encode, self._decode = encode, decode
        self.max_len, self.pad_id, self.vocab_size = v["max_len"], pad, vocab
        self.observation_space = spaces.Box(0, vocab - 1, shape=(self.max_len,), dtype=np.int64)
        self.action_space = spaces.MultiDiscrete([vocab] * v["max_action_len"])

    def _obs(self, obs: dict, info: dict) -> np.ndarray:
        prompt, fixed = replace_surrogates(obs["prompt"])
        info["obs_surrogate_replaced"] = fixed
        ids = self._token_ids(prompt)
        info["obs_length"] = len(ids)
        info["obs_truncated"] = len(ids) > self.max_len
        ids = ids[-self.max_len :]
        arr = np.full(self.max_len, self.pad_id, dtype=np.int64)
        arr[: len(ids)] = ids
        return arr

    def _token_ids(self, text: str) -> np.ndarray:
        """``encode(text)`` as int64 ids, each in ``0..vocab_size-1`` (an id outside the
        observation space is the encoder's error, named here, not an invalid observation)."""
        ids = self._encode(text)
        try:
            arr = np.asarray(list(ids))
        except (TypeError, ValueError):
            arr = np.asarray([None])
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        if (
            arr.ndim != 1
            or arr.dtype.kind not in "iu"
            or arr.min() < 0
            or arr.max() >= self.vocab_size
        ):
            raise ValueError(
                f"TokenizedView: encode returned {short_repr(ids)}; it must return a flat list of "
                f"int token ids in [0, {self.vocab_size - 1}]"
            )
        return arr.astype(np.int64)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        info = dict(info)
        return self._obs(obs, info), info

    def step(self, action):
        arr = np.asarray(action)
        if not np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
            raise TypeError(
                f"TokenizedView: action has dtype {arr.dtype}; it must be integer token ids in "
                f"{self.action_space}"
            )
        if not self.action_space.contains(arr.astype(self.action_space.dtype)):
            raise ValueError(
                f"TokenizedView: action of shape {arr.shape} (ids {arr.min(initial=0)}.."
                f"{arr.max(initial=0)}) is outside {self.action_space}: shape "
                f"{self.action_space.shape}, ids 0..{self.vocab_size - 1}"
            )
        ids = [int(i) for i in arr.reshape(-1) if int(i) != self.pad_id]
        obs, r, term, trunc, info = self.env.step(self._decode(ids))
        info = dict(info)
        return self._obs(obs, info), r, term, trunc, info
