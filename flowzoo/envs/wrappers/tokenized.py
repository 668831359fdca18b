"""A tokenised view: text observations become fixed-length integer arrays (and integer
arrays become text actions) through a given tokenizer, for numeric-space libraries."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class TokenizedView(gym.Wrapper):
    """Wrap a single-agent text env: obs -> ``Box(int64, (max_len,))`` of token ids (left
    truncated, right padded with ``pad_id``); action ``MultiDiscrete([vocab] * max_action_len)``
    -> text via ``decode``. ``info`` gets ``obs_truncated`` and ``obs_length``.

    ``tokenizer`` is a Hugging Face tokenizer, or pass ``encode``/``decode`` callables."""

    def __init__(
        self,
        env: gym.Env,
        tokenizer=None,
        max_len: int = 512,
        max_action_len: int = 64,
        vocab_size: int | None = None,
        encode: Callable[[str], list[int]] | None = None,
        decode: Callable[[list[int]], str] | None = None,
        pad_id: int = 0,
    ) -> None:
        super().__init__(env)
        if tokenizer is not None:
            encode = encode or (lambda s: tokenizer(s, add_special_tokens=False)["input_ids"])
            decode = decode or (lambda ids: tokenizer.decode(ids, skip_special_tokens=True))
            vocab_size = vocab_size or len(tokenizer)
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else pad_id
        if encode is None or decode is None or vocab_size is None:
            raise ValueError("give a tokenizer, or encode, decode and vocab_size")
        self._encode, self._decode = encode, decode
        self.max_len, self.pad_id, self.vocab_size = max_len, pad_id, vocab_size
        self.observation_space = spaces.Box(0, vocab_size - 1, shape=(max_len,), dtype=np.int64)
        self.action_space = spaces.MultiDiscrete([vocab_size] * max_action_len)

    def _obs(self, obs: dict, info: dict) -> np.ndarray:
        ids = list(self._encode(obs["prompt"]))
        info["obs_length"] = len(ids)
        info["obs_truncated"] = len(ids) > self.max_len
        ids = ids[-self.max_len :]
        arr = np.full(self.max_len, self.pad_id, dtype=np.int64)
        arr[: len(ids)] = ids
        return arr

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
