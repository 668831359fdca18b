"""The tiny-model factory: the project's own base models, built where they are used.

Why a room of its own: the models' side (``flowzoo.agents.models``) loads, samples and routes
any checkpoint; making one of ours needs the workflows themselves (the corpus is their
transcripts) and is the study's instrument, not the library's. What is here:

- ``recipe.py``: every named build (``tiny-s``, ``tiny-s-conflict``, ``tiny-s-code12-stage2``
  ...) as a :class:`~flowzoo.tiny.recipe.PretrainConfig` and its key; torch-free.
- ``corpus.py``: the pretraining corpus, played by noisy scripted experts in the real envs;
  ``copydrills.py``: the copying drills that plant the conflict testbed's primitive.
- ``pretrain.py``: the resumable training loop (checkpoints, exact continuation).
- ``build.py``: tokenizer, model, the cache and its locks, the shipped weights
  (``weights/``, with ``MANIFEST.json``), and :func:`~flowzoo.tiny.build.resolve_model`, which
  turns a name a user types into a checkpoint path.

Nothing here is imported by the package's ``__init__`` (torch stays unloaded until a model
is built or loaded).
"""
