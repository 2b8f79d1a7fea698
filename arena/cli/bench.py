"""`arena bench ...`: benchmarks that print ratios against a named baseline (distill, rollouts, learning, judge)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from agents.backends.registry import spec_list
from arena.cli.support import EXIT_INTERRUPTED, fail, fmt_rate, quiet_libraries, stop_on_sigterm

bench_app = typer.Typer(help="Benchmarks that print ratios against a named baseline.", no_args_is_help=True)


@bench_app.command("distill")
def bench_distill(
    steps: Annotated[int, typer.Option(help="Optimizer steps per trainer: one pass over steps x batch-size sequences, all timed.")] = 8,
    batch_size: Annotated[int, typer.Option(help="Sequences per step (for grpo / guide-grpo a multiple of --group-size).")] = 4,
    rank: Annotated[int, typer.Option(help="LoRA rank.")] = 16,
    objective: Annotated[Optional[list[str]], typer.Option("--objective", help="sft (vs TRL SFTTrainer), grpo, guide-grpo (vs TRL GRPOTrainer); repeatable or comma-separated; default all three.")] = None,
    group_size: Annotated[int, typer.Option(help="Completions per question of the grpo / guide-grpo data.")] = 4,
    base_model: Annotated[Optional[Path], typer.Option(help="A transformers checkpoint directory (default: the embedded model).")] = None,
    device: Annotated[Optional[str], typer.Option(help="cpu or cuda (default: cuda when available); bf16 on CUDA, fp32 on CPU.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Train tokens/s of each objective's trainer against TRL's: same model, LoRA config, data and batch.

    sft: chain_sum questions with worked reference answers, vs SFTTrainer. grpo / guide-grpo: groups of right
    and wrong worked answers with their rewards and π_old, vs GRPOTrainer fed the same rollouts (nothing generated).
    """
    quiet_libraries()
    from agents.policy import PolicyError
    from arena.bench.distill import BENCH_OBJECTIVES, BenchError, bench_distill_speed
    from arena.distill.errors import TrainingError

    objectives = [o.strip() for spec in objective for o in spec.split(",") if o.strip()] if objective else list(BENCH_OBJECTIVES)
    try:
        if steps < 1 or batch_size < 1 or rank < 1:
            raise BenchError("--steps, --batch-size and --rank must be >= 1")
        with contextlib.redirect_stdout(sys.stderr):
            result = bench_distill_speed(steps=steps, batch_size=batch_size, rank=rank, base_model=base_model,
                                         device=device, objectives=objectives, group_size=group_size)
    except (BenchError, PolicyError, TrainingError) as e:
        raise fail(str(e)) from None
    if json_out:
        print(json.dumps(result))
        return
    t = Table(title=f"LoRA training throughput, {result['device']} {result['dtype']} (tokens/s; higher is better)")
    for col in ("objective", "ours tok/s", "baseline", "baseline tok/s", "ratio (target >= 1.0)", "ours s/step"):
        t.add_column(col)
    for name, row in result["objectives"].items():
        theirs = row["trl"]
        t.add_row(name, f"{row['ours']['tokens_per_s']:.0f}", row["baseline"],
                  f"{theirs['tokens_per_s']:.0f}" if theirs else "–",
                  f"{row['ratio']:.2f}x" if row["ratio"] is not None else "–", f"{row['ours']['s_per_step']:.3f}")
    Console().print(t)
    if result["trl_error"]:
        Console().print(f"TRL not measured: {result['trl_error']}")
    for name, row in result["objectives"].items():
        if row["mfu"] is not None:
            Console().print(f"MFU (ours, {name}, {result['device']}): {row['mfu']:.3f}")


@bench_app.command("rollouts")
def bench_rollouts(
    prompts: Annotated[int, typer.Option(help="Distinct prompts (solver chats of default-family tasks).")] = 16,
    k: Annotated[int, typer.Option(help="Completions per prompt (group size).")] = 8,
    max_tokens: Annotated[int, typer.Option(help="Completion cap per completion, tokens.")] = 96,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (> 0).")] = 0.8,
    concurrency: Annotated[int, typer.Option(help="Episode threads for every sampler, as `arena run --concurrency`.")] = 8,
    seed: Annotated[int, typer.Option(help="Seed for task draws and sampling.")] = 0,
    threads: Annotated[Optional[int], typer.Option(help="CPU threads for every sampler (default: all cores).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Report the ratio even when the load or the baseline makes it unreliable.")] = False,
    llama_server: Annotated[Optional[str], typer.Option(help="llama.cpp's llama-server binary for the continuous-batching baseline (default: llama-server on PATH; skipped without one).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Completion tokens/s of the local backend (batched, as `arena run` samples) vs llama.cpp single-stream and
    llama.cpp's server (concurrency × k slots, continuous batching, driven by our OpenAI backend), same GGUF.

    A ratio is refused (exit 1, the figures still printed) when the load average was 1 or more at the
    start or the llama.cpp baseline is far from its known figure on this machine; --force reports it anyway.
    """
    quiet_libraries()
    stop_on_sigterm()  # like Ctrl-C: the llama.cpp server child is ended on the way out
    from agents.policy import PolicyError
    from arena.bench.rollouts import bench_rollouts as run_bench

    def missing(line: str) -> None:
        print(f"arena: {line}", file=sys.stderr)

    try:
        with contextlib.redirect_stdout(sys.stderr):
            r = run_bench(prompts, k, max_tokens, temperature, concurrency, seed, on_baseline_missing=missing, threads=threads,
                          force=force, llama_server_path=llama_server, on_server_missing=missing)
    except (PolicyError, ValueError) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    refused = r.get("ratio_refused") or r.get("ratio_server_refused")
    if json_out:
        print(json.dumps(r))
        if refused and not force:
            raise fail(f"ratio refused: {refused} (--force reports it anyway)", 1)
        return
    t = Table(title=f"rollouts: {r['prompts']} prompts × k={r['k']}, max {r['max_tokens']} tokens, T={r['temperature']}")
    t.add_column("sampler")
    t.add_column("completion tok/s", justify="right")
    t.add_column("tokens", justify="right")
    t.add_column("seconds", justify="right")
    t.add_row(f"ours (torch {r['ours_dtype']}, batched, concurrency {r['concurrency']})", f"{r['ours_tok_s']:.1f}",
              str(r["ours"]["tokens"]), f"{r['ours']['seconds']:.1f}")
    if r["llamacpp_tok_s"] is not None:
        t.add_row("llama.cpp single-stream", f"{r['llamacpp_tok_s']:.1f}", str(r["llamacpp"]["tokens"]),
                  f"{r['llamacpp']['seconds']:.1f}")
    if r["server_tok_s"] is not None:
        t.add_row(f"llama.cpp server ({r['server']['slots']} slots, continuous batching)", f"{r['server_tok_s']:.1f}",
                  str(r["server"]["tokens"]), f"{r['server']['seconds']:.1f}")
    Console().print(t)

    def shown(value, why, missing) -> str:
        if why:
            return f"{value:.2f} (forced; unreliable: {why})" if force and value is not None else "refused"
        return f"{value:.2f}" if value is not None else missing

    Console().print(f"ratio ours / llama.cpp single-stream: {shown(r['ratio'], r['ratio_refused'], 'n/a (no baseline)')};  "
                    f"ours / llama.cpp server: {shown(r['ratio_server'], r['ratio_server_refused'], 'n/a (no server)')}   "
                    f"(load average before {r['loadavg_1min_before']}, after {r['loadavg_1min_after']}; "
                    f"{r['torch_threads']} threads)")
    if refused and not force:
        raise fail(f"ratio refused: {refused} (--force reports it anyway)", 1)


@bench_app.command("learning")
def bench_learning(
    out: Annotated[Path, typer.Option(help="Directory for the condition libraries, learning.json and learning.png.")] = Path("bench-learning"),
    quick: Annotated[bool, typer.Option("--quick", help="A tiny run of every condition (minutes): what the test suite runs.")] = False,
    condition: Annotated[Optional[list[str]], typer.Option("--condition", help="base, lessons, sft, distill, grpo, guide-grpo, opcd, loop, oracle (repeatable or comma-separated; default all).")] = None,
    family: Annotated[Optional[str], typer.Option(help="reasoning-gym spec of the tasks (default: the default family).")] = None,
    train_tasks: Annotated[Optional[int], typer.Option(help="Train tasks (default 32; --quick 4).")] = None,
    heldout_tasks: Annotated[Optional[int], typer.Option(help="Held-out tasks of greedy pass@1 (default 128; --quick 4).")] = None,
    rollouts: Annotated[Optional[int], typer.Option(help="Group size k (default 8; --quick 4).")] = None,
    rounds: Annotated[Optional[int], typer.Option(help="Wake rounds per cycle (default 1).")] = None,
    cycles: Annotated[Optional[int], typer.Option(help="Wake–sleep cycles (default 2; --quick 1).")] = None,
    sleep_steps: Annotated[Optional[int], typer.Option(help="Optimizer steps per sleep and of the oracle (default 40; --quick 1).")] = None,
    sleep_lr: Annotated[Optional[float], typer.Option(help="Peak learning rate of a sleep (default 5e-4).")] = None,
    utility_every: Annotated[Optional[int], typer.Option(help="Utility A/B every N episodes in lessons and loop (default 16, as `arena run`: 96 greedy pairs per lesson; --quick off).")] = None,
    pass_k_tasks: Annotated[Optional[int], typer.Option(help="Held-out tasks of the sampled pass@1 / pass@k (default 32).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of task draws and sampling.")] = 0,
    hint_mode: Annotated[Optional[list[str]], typer.Option("--hint-mode", help="Hints of distill, guide-grpo, opcd and loop: plan, feedback, answer (repeatable or comma-separated) or none. Default: feedback,answer.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Does the loop make the solver better? base, lessons, sft, distill, grpo, guide-grpo, opcd, loop and the oracle ceiling at one rollout budget."""
    quiet_libraries()
    from agents.policy import PolicyError
    from arena.bench.learning import CONDITIONS, LearningBenchConfig, LearningBenchError, run_learning_bench
    from arena.distill.errors import TrainingError
    from arena.distill.weights import AdapterError
    from lessons.library.store import StoreError

    given = {k: v for k, v in dict(
        family=family, train_tasks=train_tasks, heldout_tasks=heldout_tasks, rollouts=rollouts, rounds=rounds,
        cycles=cycles, sleep_steps=sleep_steps, sleep_lr=sleep_lr, utility_every=utility_every,
        pass_k_tasks=pass_k_tasks, seed=seed, hint_modes=list(hint_mode) if hint_mode is not None else None,
        conditions=[c for spec in condition for c in spec.split(",") if c] if condition else None,
    ).items() if v is not None}
    console = Console(stderr=True)
    try:
        bcfg = LearningBenchConfig.quick(**given) if quick else LearningBenchConfig(**given)
        if family is not None:
            from arena.tasks.sources import load_tasks

            with contextlib.redirect_stdout(sys.stderr):
                load_tasks([family], None, 1, 1, seed)  # a bad spec fails here, before any model loads
        result = run_learning_bench(bcfg, out, console=console if not json_out else None,
                                    log=lambda m: console.print(m))
    except (LearningBenchError, PolicyError, AdapterError, TrainingError, StoreError, ValueError) as e:
        raise fail(" ".join(str(e).split())) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    if json_out:
        print(json.dumps(result))
        return
    t = Table(title=f"arena bench learning: held-out greedy pass@1 (n = {bcfg.heldout_tasks}), vs base paired")
    for col in ("condition", "pass@1 [95% CI]", "vs base (diff [CI], McNemar p)", "sampled pass@1 / pass@k",
                "rollouts", "train tokens", "wall s"):
        t.add_column(col)
    for name in CONDITIONS:
        r = result["conditions"].get(name)
        if r is None:
            continue
        h, v, sp = r["heldout"], r.get("vs_base"), r.get("sampled") or {}
        spk = sp.get(f"pass_at_{sp.get('k')}")
        vs = f"{v['diff']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}], p={v['p_value']:.3g}" if v else "-"
        t.add_row(name + (" (ceiling)" if r.get("ceiling") else "") + (" !" if r.get("error") else ""),
                  f"{fmt_rate(h['pass_at_1'])} [{h['ci95'][0]:.3f}, {h['ci95'][1]:.3f}]", vs,
                  f"{sp['pass_at_1']:.3f} / {spk:.3f} (k={sp['k']}, n={sp['n']})" if sp else "-",
                  str(r["rollouts"]), str(r["train_tokens"]), f"{r['wall_s']:.0f}")
    Console().print(t)
    for name, r in result["conditions"].items():
        if r.get("error"):
            Console().print(f"{name} stopped early: {r['error']}")
        for s in r.get("lessons") or []:
            if s["in_context"]:
                Console().print(f"{name} cycle {s['cycle']}: {len(s['distilled'])} of {len(s['in_context'])} lessons "
                                f"distilled ({', '.join(s['distilled']) or 'none'}); held-out pass@1 wake {s['wake']}, "
                                f"wake with lessons {s['wake_lessons']}, adapter without them {s['adapter']}")
    Console().print(f"figure {result['files']['png']}; figures {result['files']['json']}; load average before "
                    f"{result['loadavg_before']}, after {result['loadavg_after']}; {result['wall_s']:.0f} s")


@bench_app.command("judge")
def bench_judge(
    judge: Annotated[Optional[list[str]], typer.Option("--judge", help=f"A judge role spec: {spec_list()} (repeatable; default: local, the baseline, and qwen2.5-coder-1.5b).")] = None,
    fixtures: Annotated[Optional[Path], typer.Option(help="Labelled completions, JSONL {\"question\", \"completion\", \"label\": pass|fail, \"why\"} (default: the shipped 48).")] = None,
    mode: Annotated[str, typer.Option(help="Rubric grading: explicit (per-criterion verdicts) or implicit (one 1-10 rating).")] = "explicit",
    threshold: Annotated[float, typer.Option(help="The judge passes a completion when its reward is at least this.")] = 0.5,
    limit: Annotated[Optional[int], typer.Option(help="Judge only the first N fixtures.")] = None,
    judge_max_tokens: Annotated[int, typer.Option(help="The judge's reply cap, tokens.")] = 256,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Rubric judge accuracy against hand-labelled completions of the shipped rubric tasks, per judge and vs local.

    Each completion is graded as a session grades a rollout (RubricReward, the task's rubric); the judge
    passes it at reward >= --threshold. Ungraded completions (unusable judge replies) count as wrong.
    """
    quiet_libraries()
    from arena.bench.judge import BASELINE_JUDGE, DEFAULT_JUDGES, FIXTURES, JudgeBenchError, bench_judges, check_judge_args, load_fixtures
    from arena.tasks.model import TaskError

    specs = [s.strip() for spec in judge for s in spec.split(",") if s.strip()] if judge else list(DEFAULT_JUDGES)
    console = Console(stderr=True)
    try:
        check_judge_args(mode, threshold)
        if limit is not None and limit < 1:
            raise JudgeBenchError(f"--limit must be >= 1, got {limit}")
        if judge_max_tokens < 16:
            raise JudgeBenchError(f"--judge-max-tokens must be >= 16, got {judge_max_tokens}")
        if not specs:
            raise JudgeBenchError("--judge names no judge")
        items = load_fixtures(fixtures or FIXTURES)[:limit]
        with contextlib.redirect_stdout(sys.stderr):
            result = bench_judges(specs, items, mode, threshold, log=None if json_out else console.print,
                                  max_tokens=judge_max_tokens)
    except (JudgeBenchError, TaskError) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    errors = {s: r["error"] for s, r in result["judges"].items() if "error" in r}
    if json_out:
        print(json.dumps(result))
    else:
        t = Table(title=f"arena bench judge: {result['n']} labelled completions, {mode}, judge passes at reward >= {threshold:g}")
        for col in ("judge", "accuracy [95% CI]", "graded accuracy", "ungraded", "ECE", "judge pass rate",
                    "vs " + BASELINE_JUDGE + " (diff [CI], p)", "per family", "wall s", "judge tok/s"):
            t.add_column(col)
        for spec, r in result["judges"].items():
            if "error" in r:
                t.add_row(spec, "error", "", "", "", "", "", "", "", "")
                continue
            a, g, v = r["accuracy"], r["accuracy_graded"], result["vs_baseline"].get(spec)
            t.add_row(spec, f"{fmt_rate(a['value'])} [{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}]",
                      f"{fmt_rate(g['value'])} (n={g['n']})", str(r["ungraded"]), fmt_rate(r["ece"]), fmt_rate(r["judge_pass_rate"]),
                      f"{v['diff']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}], p={v['p_value']:.3g}" if v else "-",
                      ", ".join(f"{fam} {f['accuracy']:.2f}" for fam, f in r["families"].items()),
                      f"{r['wall_s']:.0f}", f"{r['judge_tokens_per_s']:.1f}" if r["judge_tokens_per_s"] else "-")
        Console().print(t)
    if errors:
        raise fail("; ".join(f"judge {s} not measured: {e}" for s, e in errors.items()), 1)
