"""The bundled GRPO trainer: torch loss pieces (``stepgym.trainers.losses``), the rollout collector, the teacher and
the training loop. The advantage shapers it calls are the top-level, pure-NumPy ``stepgym.shapers``.

This package ``__init__`` deliberately imports nothing: the trainer's heavy dependencies load only when the trainer module itself is imported.
"""
