"""The ``strata`` command: a thin layer over :mod:`strata_cli.stack` and the clients."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _settings(args: argparse.Namespace) -> Any:
    from strata.config import load_settings
    from strata_cli.options import store_overrides

    overrides: dict[str, Any] = store_overrides(args)
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    settings = load_settings(args.config, **overrides)
    if getattr(args, "port", None):
        settings = settings.model_copy(update={"serve": settings.serve.model_copy(update={"port": args.port})})
    return settings


def _say(message: str) -> None:
    print(message, flush=True)


def _say_on_stderr(message: str) -> None:
    """For ``strata mcp``, whose stdout is the protocol's."""
    print(message, file=sys.stderr, flush=True)


def _stack(args: argparse.Namespace, *, running: bool = False) -> Any:
    """The stack for the command; ``running``: the one ``up`` started in the data dir, if any."""
    from strata_cli.stack import Stack

    settings = _settings(args)
    if running:
        recorded = Stack.recorded(settings.data_dir, say=_say)
        if recorded is not None:
            return recorded
    return Stack(settings, say=_say)


def _still_up(stack: Any) -> str:
    """The last line of a command that leaves the stack running: where, and how to stop it."""
    return (f"The stack is still up at {stack.url}; stop it with: "
            f"strata down --data-dir {shlex.quote(str(stack.data_dir))}")


def _running_or_new(args: argparse.Namespace) -> Any:
    """The stack running with the data dir (on the ports it chose), unless ``--port`` asks for
    another; else a new one."""
    return _stack(args, running=not getattr(args, "port", None))


def _cmd_up(args: argparse.Namespace) -> int:
    stack = _stack(args)
    key = stack.up()
    print(f"Strata is up at {stack.url}  (API docs: {stack.url}/docs)")
    print(f"development API key for tenant 'demo' (also in {stack.key_file}):")
    print(key)
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    _stack(args, running=True).down()
    print("Strata is down; data kept in", _settings(args).data_dir.resolve())
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from strata_cli.status import stack_status

    stack = _stack(args, running=True)
    report = stack_status(stack)
    for name, state in report.items():
        print(f"{name:9} {state}")
    if stack.ray_running():
        from strata.errors import StrataError
        from strata_cli.scale import layer_lines

        try:
            lines = layer_lines(stack)
        except StrataError as exc:
            lines = {"layers": f"not answering: {exc.message}"}
        for layer, line in lines.items():
            print(f"{layer:10} {line}")
    return 0 if report["serve"].startswith("healthy") else 1


def _cmd_scale(args: argparse.Namespace) -> int:
    from strata_cli.scale import scale_layer

    placement = scale_layer(_stack(args, running=True), args.layer, args.shards)
    print(f"{placement.layer}: {placement.shards} shards (placement epoch {placement.epoch})")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from strata_cli.demo import run_demo

    stack = _running_or_new(args)
    key = stack.up() if not stack.healthy() or not stack.key_file.exists() else stack.key_file.read_text().strip()
    print(f"\n== demo against {stack.url} ==")
    run_demo(stack.url, key)
    print("\n" + _still_up(stack))
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    import os

    from tqdm import tqdm

    from strata_cli.importer import collect_files, import_paths
    from strata_serve.client import StrataClient

    collect_files(args.paths)  # a missing path fails before anything is sent
    url, key = args.url, args.api_key or os.environ.get("STRATA_API_KEY")
    if url is None or key is None:
        stack = _stack(args, running=True)
        if not stack.healthy():
            raise FileNotFoundError(f"no running Strata at {stack.url}: run `strata up` or pass --url and --api-key")
        url = url or stack.url
        key = key or stack.key_file.read_text().strip()
    bars: list[Any] = []

    def progress(n: int, name: str) -> Any:
        for bar in bars:
            bar.close()
        bar = tqdm(total=0, desc=f"{n} {name}"[-60:], unit="chunk", leave=True)
        bars[:] = [bar]

        def update(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

        return update

    with StrataClient(url, key, timeout_s=60.0) as client:
        report = import_paths(client, args.paths, progress=progress)
    for bar in bars:
        bar.close()
    print(f"indexed {len(report.indexed)} document(s), {report.children} chunks, in {report.seconds:.1f} s")
    for name, why in report.failed.items():
        print(f"  failed: {name}: {why}", file=sys.stderr)
    return 1 if report.failed else 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    """MCP over stdio: stdout is the protocol's, so this prints nothing there."""
    from strata_cli.stack import Stack
    from strata_mcp import serve_stdio

    url, key = os.environ.get("STRATA_URL"), os.environ.get("STRATA_API_KEY")
    if not url or not key:
        settings = _settings(args)
        stack = Stack.recorded(settings.data_dir, say=_say_on_stderr) or Stack(settings, say=_say_on_stderr)
        url = url or stack.url
        if not key:
            if not stack.key_file.exists():
                raise FileNotFoundError(
                    f"no API key: set STRATA_API_KEY, or start the stack with `strata up` (it writes {stack.key_file})"
                )
            key = stack.key_file.read_text().strip()
    serve_stdio(url, key)
    return 0


def _in_cluster(args: argparse.Namespace) -> tuple[Any, Callable[[str], Any]]:
    """The stack (started unless it is up) and what makes an in-cluster client of a tenant on it."""
    from strata_actors.client import InClusterClient

    stack = _running_or_new(args)
    if not stack.healthy() or not stack.key_file.exists():
        stack.up()
    InClusterClient.for_running_stack("demo", data_dir=str(stack.data_dir))

    def make_client(tenant: str) -> InClusterClient:
        return InClusterClient(tenant, stack.settings)

    return stack, make_client


def _write_document(args: argparse.Namespace, document: dict[str, Any], *,
                    plot: Callable[[dict[str, Any], str], None] | None = None) -> None:
    """An eval's ``--json`` (the document) and ``--plot`` (the chart ``plot`` draws of it)."""
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=2))
        print(f"\nwrote {args.json}")
    if plot is not None and args.plot:
        plot(document, args.plot)
        print(f"wrote {args.plot}")


def _cmd_eval_retrieval(args: argparse.Namespace) -> int:
    from strata.providers.embedder import make_embedder
    from strata_bench.evaluation.datasets import load_benchmark
    from strata_bench.evaluation.plot import plot_results
    from strata_bench.evaluation.retrieval import BASELINES, evaluate, format_table

    ks = sorted({int(k) for k in args.k.split(",")})
    retrievers = [r.strip() for r in args.retriever.split(",") if r.strip()]
    unknown = set(retrievers) - {*BASELINES, "strata"}
    if unknown:
        raise FileNotFoundError(f"unknown retriever(s) {sorted(unknown)}; choose from bm25, dense, rrf, strata")
    benchmark = load_benchmark(args.dataset, args.format)
    categories = None if args.categories == "all" else (
        set(args.categories.split(",")) if args.categories else
        {q.category for c in benchmark.conversations for q in c.questions} - {"adversarial"}
    )
    settings = _settings(args)
    make_client = None
    if "strata" in retrievers:
        stack, make_client = _in_cluster(args)
    document = evaluate(
        benchmark, retrievers=retrievers, ks=ks, categories=categories,
        embedder=make_embedder(settings.embedding), make_client=make_client,
        count_llm=settings.llm.enabled,
    )
    print(f"{benchmark.name}: {sum(len(c.questions) for c in benchmark.conversations)} questions "
          f"({benchmark.skipped_questions} skipped for empty evidence), categories: "
          f"{'all' if categories is None else ', '.join(sorted(categories))}")
    print(format_table(document, ks))
    _write_document(args, document, plot=plot_results)
    if make_client is not None:
        print(_still_up(stack))
    return 0


def _cmd_eval_context(args: argparse.Namespace) -> int:
    from strata.providers.embedder import make_embedder
    from strata.providers.tokens import TiktokenCounter
    from strata_bench.evaluation.context import evaluate_context, format_context_table, limit_benchmark
    from strata_bench.evaluation.datasets import load_benchmark
    from strata_bench.evaluation.plot import plot_context

    budgets = sorted({int(b) for b in args.budgets.split(",")})
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    benchmark = limit_benchmark(load_benchmark(args.dataset, args.format), conversations=args.limit,
                                questions=args.max_questions)
    settings = _settings(args)
    make_client = None
    if not args.baselines_only:
        stack, make_client = _in_cluster(args)
        settings = stack.settings
    document = evaluate_context(
        benchmark, budgets=budgets, baselines=baselines, no_answer=set(args.no_answer.split(",")) - {""},
        embedder=make_embedder(settings.embedding) if "rrf" in baselines else None,
        counter=TiktokenCounter(settings.working.encoding), make_client=make_client, top_k=args.top_k,
    )
    print(f"{benchmark.name}: {document['conversations']} conversations, {document['questions']} questions")
    print(format_context_table(document))
    _write_document(args, document, plot=plot_context)
    if make_client is not None:
        print(_still_up(stack))
    return 0


def _cmd_eval_answers(args: argparse.Namespace) -> int:
    from strata_bench.evaluation.answers import evaluate_answers, format_answers_table, select_questions
    from strata_bench.evaluation.chat import Endpoint
    from strata_bench.evaluation.datasets import load_benchmark

    benchmark = load_benchmark(args.dataset, args.format)
    categories = None if args.categories == "all" else (
        set(args.categories.split(",")) if args.categories else
        {q.category for c in benchmark.conversations for q in c.questions} - {"adversarial"}
    )
    benchmark, without_gold = select_questions(benchmark, categories=categories, limit=args.limit)
    # Never OPENAI_API_KEY: an OpenAI key is not sent to whatever URL --llm names.
    key = args.api_key or os.environ.get("STRATA_EVAL_LLM_KEY") or "none"
    answer = Endpoint(base_url=args.llm, model=args.model, api_key=key, max_tokens=args.max_tokens,
                      timeout_s=args.timeout)
    judge = Endpoint(base_url=args.judge_llm or args.llm, max_tokens=args.judge_max_tokens, api_key=key,
                     model=args.judge_model or (args.model if args.judge_llm in (None, args.llm) else None),
                     timeout_s=args.timeout)
    stack, make_client = _in_cluster(args)
    try:
        document = evaluate_answers(benchmark, make_client=make_client, answer=answer, judge=judge,
                                    budget_tokens=args.budget, top_k=args.top_k, concurrency=args.concurrency)
    except ValueError as exc:  # an endpoint that cannot say which model it serves
        print(f"strata eval answers: {exc}", file=sys.stderr)
        return 2
    document["questions_without_gold"] = without_gold
    print(f"{benchmark.name}: {document['questions']} questions of {document['conversations']} conversations "
          f"({benchmark.skipped_questions} skipped for empty evidence, {without_gold} without a gold answer), "
          f"categories: {'all' if categories is None else ', '.join(sorted(categories))}")
    print(format_answers_table(document))
    _write_document(args, document)
    print(_still_up(stack))
    return 0


def _cmd_eval_chunking(args: argparse.Namespace) -> int:
    from strata_bench.evaluation.chunking import run

    return run(args, _settings(args).semantic)


def _add_eval(sub: Any) -> None:
    """``strata eval``: its parsers read the benchmark modules (~0.5 s of imports, langchain's
    splitters among them), so they are built only when the command is ``eval`` (or unknown)."""
    evaluation = sub.add_parser("eval", help="measure memory quality on a benchmark")
    kinds = evaluation.add_subparsers(dest="kind", required=True)
    retrieval = kinds.add_parser(
        "retrieval", help="turn-level recall@k of Strata and baselines; with the strata retriever it starts the "
        "stack if needed and leaves it running (the last line says how to stop it)",
    )
    retrieval.add_argument("--dataset", required=True, help="LoCoMo JSON or Strata's neutral format")
    retrieval.add_argument("--format", choices=["locomo", "strata"], help="default: detected")
    retrieval.add_argument("--k", default="1,5,10,20", help="comma-separated cut-offs")
    retrieval.add_argument("--categories", help="comma-separated; default all but adversarial; 'all' for every one")
    retrieval.add_argument("--retriever", default="bm25,dense,rrf,strata", help="comma-separated")
    retrieval.add_argument("--json", help="write the results here")
    retrieval.add_argument("--plot", help="write a bar chart (PNG) here")
    retrieval.add_argument("--data-dir", help="the stack's data dir (default ./.strata)")
    retrieval.add_argument("--config", default=argparse.SUPPRESS, help="YAML settings (as `strata --config`)")
    retrieval.set_defaults(fn=_cmd_eval_retrieval)
    context = kinds.add_parser(
        "context", help="evidence recall and tokens of the context Strata returns at several budgets, against "
        "the whole history and a baseline packed to the same budget; starts the stack if needed and leaves it running",
    )
    context.add_argument("--dataset", required=True, help="LoCoMo JSON or Strata's neutral format")
    context.add_argument("--format", choices=["locomo", "strata"], help="default: detected")
    context.add_argument("--budgets", default="256,512,1024,2048", help="comma-separated token budgets")
    context.add_argument("--baselines", default="bm25,rrf", help="comma-separated, of bm25 and rrf")
    context.add_argument("--no-answer", default="adversarial",
                         help="comma-separated categories whose answer is not in the history")
    context.add_argument("--top-k", type=int, help="items per layer (default: the task type's configured depth)")
    context.add_argument("--limit", type=int, help="only the first N conversations")
    context.add_argument("--max-questions", type=int, help="only the first N questions of each conversation")
    context.add_argument("--baselines-only", action="store_true", help="no stack: the references alone")
    context.add_argument("--json", help="write the results here")
    context.add_argument("--plot", help="write recall against tokens (PNG) here")
    context.add_argument("--data-dir", help="the stack's data dir (default ./.strata)")
    context.add_argument("--config", default=argparse.SUPPRESS, help="YAML settings (as `strata --config`)")
    context.set_defaults(fn=_cmd_eval_context)
    from strata_bench.evaluation import answers as eval_answers

    answers = kinds.add_parser(
        "answers", help="LoCoMo's protocol end to end: Strata's context, an LLM's answer, an LLM judge's "
        "CORRECT/WRONG; starts the stack if needed and leaves it running",
    )
    eval_answers.add_arguments(answers)
    answers.add_argument("--config", default=argparse.SUPPRESS, help="YAML settings (as `strata --config`)")
    answers.set_defaults(fn=_cmd_eval_answers)
    from strata_bench.evaluation.chunking import add_arguments

    chunking = kinds.add_parser(
        "chunking",
        help="chunking strategies and retrieval paths of the semantic layer, on documents made from a benchmark",
    )
    add_arguments(chunking)
    chunking.add_argument("--config", default=argparse.SUPPRESS, help="YAML settings (as `strata --config`)")
    chunking.set_defaults(fn=_cmd_eval_chunking)


def _add_bench(sub: Any) -> None:
    """``strata bench`` and its benchmarks, built only when the command is ``bench`` (or unknown)."""
    from strata_bench import fanout as bench_fanout
    from strata_bench import service as bench_service
    from strata_cli.bench_stack import target as bench_target
    from strata_cli.options import add_store_arguments

    bench = sub.add_parser(
        "bench", help="benchmarks that print figures measured in one run; without a name, the service benchmark",
        description="Without a benchmark name: the service benchmark (latency, ingest and scale over HTTP, "
        "each against a floor measured in the same run).",
    )
    bench_service.add_arguments(bench)
    add_store_arguments(bench)
    bench.set_defaults(fn=lambda a: bench_service.run(a, bench_target))
    benches = bench.add_subparsers(dest="bench", required=False, metavar="{contention,depth,fanout,llm,pii}")
    contention = benches.add_parser(
        "contention", help="concurrent outcome updates of one skill, atomic and with If-Match: no update lost"
    )
    bench_fanout.add_arguments(contention)
    add_store_arguments(contention)
    contention.add_argument("--clients", type=int, default=16)
    contention.add_argument("--updates", type=int, default=50, help="updates per client")
    contention.set_defaults(fn=lambda a: bench_fanout.run(a, "contention", bench_target))
    from strata_bench.service import depth as bench_depth

    depth = benches.add_parser(
        "depth", help="one tenant grown to 100k turns: ingest, context p50/p95, RSS per turn, cold load, move wait"
    )
    bench_depth.add_arguments(depth)
    add_store_arguments(depth)
    depth.set_defaults(fn=lambda a: bench_depth.run(a, bench_target))
    fanout = benches.add_parser("fanout", help="/v1/context over four layers against each single layer")
    bench_fanout.add_arguments(fanout)
    add_store_arguments(fanout)
    fanout.add_argument("--calls", type=int, default=60, help="measured calls per layer set")
    fanout.set_defaults(fn=lambda a: bench_fanout.run(a, "fanout", bench_target))
    from strata_bench import llm as bench_llm

    llm = benches.add_parser(
        "llm", help="the LLM's four features end to end against a real model: acceptances, fallbacks, latency"
    )
    bench_llm.add_arguments(llm)
    add_store_arguments(llm)
    llm.set_defaults(fn=lambda a: bench_llm.run(a, bench_target))
    from strata_bench import pii as bench_pii

    pii = benches.add_parser("pii", help="precision and recall of PII redaction per type, on the labelled corpus")
    bench_pii.add_arguments(pii)
    pii.set_defaults(fn=bench_pii.run)


def _command_of(argv: list[str] | None) -> str | None:
    """The command ``argv`` names (``keys`` in ``strata --config x.yaml keys list``), or None
    (``--help``, nothing, or a name that is no command) for a parser with every command."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--config")
    first.add_argument("command", nargs="?")
    known, _ = first.parse_known_args(sys.argv[1:] if argv is None else argv)
    return known.command if known.command in _COMMANDS else None


#: Every command, so that :func:`_command_of` knows one (tests/unit/test_cli_commands.py checks the list).
_COMMANDS = (
    "up", "down", "status", "demo", "scale", "import", "mcp", "eval", "bench", "keys", "reindex", "export", "restore"
)


def main(argv: list[str] | None = None) -> int:
    from strata_cli.options import add_store_arguments

    command = _command_of(argv)
    parser = argparse.ArgumentParser(prog="strata", description="Strata: a four-layer memory runtime for AI agents")
    parser.add_argument("--config", help="YAML settings file (default: $STRATA_CONFIG, else built-in defaults)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, help_text in (
        ("up", _cmd_up, "start milvus-lite, Ray and the HTTP API on 127.0.0.1"),
        ("down", _cmd_down, "stop everything `up` started; keep the data"),
        ("status", _cmd_status, "say what runs"),
        ("demo", _cmd_demo, ("run a scripted conversation and show the context Strata returns; starts the "
                             "stack if needed and leaves it running (the last line says how to stop it)")),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--data-dir", help="where data and logs live (default ./.strata)")
        if name in ("up", "demo"):
            p.add_argument("--port", type=int, help="HTTP port (default 8000)")
            add_store_arguments(p)
        p.set_defaults(fn=fn)
    scale = sub.add_parser("scale", help="grow or shrink a layer's shards on the running stack, moving its tenants")
    scale.add_argument("layer", help="working, episodic, semantic or procedural")
    scale.add_argument("shards", type=int, help="the layer's shard count from now on")
    scale.add_argument("--data-dir", help="where data and logs live (default ./.strata)")
    scale.set_defaults(fn=_cmd_scale)
    importing = sub.add_parser("import", help="index files and folders (Markdown, text) as documents")
    importing.add_argument("paths", nargs="+", help="files, or folders searched for .md .markdown .txt .rst .adoc")
    importing.add_argument("--url", help="Strata's HTTP address (default: the stack running in --data-dir)")
    importing.add_argument("--api-key", help="default: $STRATA_API_KEY, else the stack's dev key")
    importing.add_argument("--data-dir", help="the stack's data dir (default ./.strata)")
    importing.set_defaults(fn=_cmd_import)
    mcp = sub.add_parser(
        "mcp", help="serve the memory tools over MCP on stdin/stdout (for Claude Desktop, Cursor and other MCP clients)"
    )
    mcp.add_argument(
        "--data-dir",
        help="without STRATA_URL / STRATA_API_KEY: the stack running with this data dir and its dev key "
        "(default ./.strata)",
    )
    mcp.set_defaults(fn=_cmd_mcp)
    if command is None or command == "eval":
        _add_eval(sub)
    if command is None or command == "bench":
        _add_bench(sub)
    from strata_cli import keys as keys_cli

    keys = sub.add_parser("keys", help="create, list, rotate and revoke API keys")
    keys_cli.add_arguments(keys)
    from strata_cli import reindex as reindex_cli

    reindex_cli.add_arguments(sub.add_parser(
        "reindex", help="embed every stored vector again with the configured embedder (with the stack down)"
    ))
    from strata_cli import portable

    portable.add_arguments(
        sub.add_parser("export", help="write a tenant's memory to a JSON Lines file (from the running stack)"),
        sub.add_parser("restore", help="write an export back into a tenant of the running stack"),
    )
    args = parser.parse_args(argv)
    # Everything this command writes (data dir, logs, Ray's driver files) is owner-only.
    os.umask(0o077)
    from pydantic import ValidationError

    from strata import schema
    from strata.errors import StrataError
    from strata.schema import export as export_format
    from strata_cli.errors import StackError

    try:
        return int(args.fn(args))
    except StackError as exc:
        print(f"strata {args.command}: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        # A request body (strata.schema's models: a record the command was given) is not the
        # settings (a file, STRATA_* variables or flags), which every other model here is.
        records = (*schema.__all__, *export_format.__all__)
        what = f"invalid {exc.title}" if exc.title in records else "invalid settings"
        print(f"strata {args.command}: {what}: {problems}", file=sys.stderr)
        return 2
    except StrataError as exc:
        print(f"strata {args.command}: {exc.message}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"strata {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
