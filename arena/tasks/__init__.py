"""Task sources and verifiers: reasoning-gym families and JSONL files.

A :class:`~arena.tasks.model.Task` is one prompt with a verifier. The modules, one job each:

- :mod:`arena.tasks.model`: ``Task``, ``FamilySpec``, ``TaskSplits``, ``TaskError``, ``Split``.
- :mod:`arena.tasks.gym`: **reasoning-gym** (procedural, verifiable tasks): a family spec such
  as ``"chain_sum:min_terms=2,max_terms=2"`` names a registered dataset
  (``reasoning_gym.factory.DATASETS``) and overrides fields of its config dataclass;
  ``make_family_tasks`` draws disjoint train and held-out splits and ``gym_score`` calls the
  dataset's own ``score_answer``.
- :mod:`arena.tasks.seeds`: the dataset seed blocks of those draws and ``episode_seed``.
- :mod:`arena.tasks.jsonl`: **JSONL** task files, one ``{"question", "answer"}`` object per
  line, scored by exact match after normalisation or by numeric match (``load_tasks_file``).
  A line may instead (or also) carry a RaR rubric, ``{"question", "rubric": [{"title",
  "description", "weight"}], "reference"?}``, graded by a judge model
  (:mod:`arena.episode.rewards`); its rubric, reference and whether it has a verifier are
  kept in ``metadata``.
- :mod:`arena.tasks.sources`: ``load_tasks``, both sources together for a session.
- :mod:`arena.tasks.identity`: ``task_identity``, when two tasks are the same task in any spelling
  (held-out isolation compares it, never text), and ``check_disjoint`` of the splits.
- :mod:`arena.tasks.verify`: ``score``, ``answers_match``, ``has_verifier``, ``verifier_feedback``.
- :mod:`arena.tasks.curriculum`: difficulty ladders from reasoning-gym curricula and the
  draws at a rung (the session's self-play curriculum drives them).
- :mod:`arena.tasks.extract`: answer extraction and normalisation.

The reference ``answer`` reaches the critic (and the teacher's hint step) only, never
the solver. User errors raise ``TaskError`` with a one-line message.
"""
