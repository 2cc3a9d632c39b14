"""`robo-ray` command line: run | discover | spec | validate | demo. Errors are one line on stderr with a stable
code; a traceback only with --debug. Exit codes: 0 ok, 1 other, 2 usage, 3 validation/quarantine, 4 conflict."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from robo_ray.errors import RoboRayError, UsageError
from robo_ray.secrets import redact
from robo_ray.writers import DEFAULT_TARGET, writer_class, writer_names

MODES = ("in-process", "safe", "parallel-half", "parallel-max")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        print(f"error[RR200]: {self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def _common_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML job config (see configs/)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    p.add_argument("--mapping", help="mapping.yaml from a previous `spec` run (edited)")
    p.add_argument("--format", dest="source_format", help="source format (default: detected)")
    p.add_argument("--name", help="output dataset name (default: from the source folder)")
    p.add_argument("--source-name", metavar="NAME[:VERSION]",
                   help="a dataset inside a tfds data_dir SRC (RLDS sources; also SRC?name=NAME)")
    p.add_argument("--split", metavar="A,B", help="convert only these source splits (default: all, kept per episode)")
    p.add_argument("--val-fraction", type=float, metavar="F",
                   help="move this fraction of the train episodes to a `val` split (deterministic; splits.val_fraction)")
    p.add_argument("--fps", type=float, help="the source's frame rate when it declares none (e.g. RLDS)")
    p.add_argument("--max-episodes", type=int, help="convert only the first N episodes")
    p.add_argument("--instruction", metavar="TEXT",
                   help="language instruction of every step without task text (sources without tasks, e.g. "
                        "Minari; empty task strings); config source.instruction")
    p.add_argument("--image-format", choices=("jpeg", "png"), help="image encoding (default jpeg q95)")
    p.add_argument("--overwrite", action="store_true", help="replace robo-ray outputs in DST")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run in DST: convert only the shards not yet committed "
                        "(refused if the config differs, unless --overwrite)")
    p.add_argument("--mode", choices=MODES, default="in-process",
                   help="in-process (no Ray), safe (1 Ray actor), parallel-half, parallel-max")
    p.add_argument("--actors", type=int, help="explicit number of Ray actors")
    p.add_argument("--max-actors", type=int, metavar="N",
                   help="the most actors the pool may grow to on an autoscaling cluster (when Ray does not expose "
                        "the autoscaler's ceiling); it starts with what fits and grows as nodes join")
    p.add_argument("--address", help="Ray address: auto | ray://host:port | local (default: in-process ray.init)")
    p.add_argument("--shared-destination", action="store_true",
                   help="DST is a local path every node of the Ray cluster sees (NFS, a shared volume): allowed on "
                        "a multi-node cluster (config target.shared)")
    p.add_argument("--archive", action="store_true", help="also write <name>.tar.gz of the dataset")
    p.add_argument("--dry-run", action="store_true", help="print what a conversion would do, write nothing")
    p.add_argument("--to", choices=writer_names(), default=None,
                   help=f"target format: {', '.join(writer_names())} (default: target.format, {DEFAULT_TARGET})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="robo-ray", description="Convert robot-learning datasets between formats, on Ray.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("run", help="discover -> spec -> convert -> validate -> publish")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--source", dest="more_sources", action="append", default=[], metavar="SRC",
                   help="another source written into the same dataset (repeatable; features matched by canonical "
                        "name and role; runs on Ray Data through robo_ray.data)")
    _common_run_args(p)
    d = sub.add_parser("discover", help="inventory.json + episode_index.csv (and findings)")
    d.add_argument("src")
    d.add_argument("dst", nargs="?", help="where to write the files (default: print only)")
    d.add_argument("--format", dest="source_format")
    d.add_argument("--dry-run", action="store_true", help="print what a conversion would do")
    sp = sub.add_parser("spec", help="inventory + mapping.md + mapping.yaml (edit it, pass back with --mapping)")
    sp.add_argument("src")
    sp.add_argument("dst")
    _common_run_args(sp)
    cv = sub.add_parser("convert", help="discover -> spec -> convert and commit; structural checks only "
                                        "(then `validate` and `publish`)")
    cv.add_argument("src")
    cv.add_argument("dst")
    _common_run_args(cv)
    v = sub.add_parser("validate", help="re-validate a finished output folder")
    v.add_argument("dst")
    v.add_argument("--no-tfds", action="store_true", help="skip the tfds read-back")
    v.add_argument("--actors", type=int, help="re-read the units with Ray tasks on this many CPUs' worth of a new "
                                              "in-process Ray instance (default: one after the other, here)")
    v.add_argument("--address", help="re-read the units on this Ray cluster (auto | ray://host:port)")
    pb = sub.add_parser("publish", help="validate and write final_report.md, checksums, logs (and an archive)")
    pb.add_argument("dst")
    pb.add_argument("--archive", action="store_true", help="also write <name>.tar.gz of the dataset")
    pb.add_argument("--no-tfds", action="store_true", help="skip the tfds read-back")
    demo = sub.add_parser("demo", help="convert the bundled example and show how to load it")
    demo.add_argument("dst", nargs="?", default="demo_output")
    return parser


def _config(args: argparse.Namespace) -> Any:
    from robo_ray.config import load_config

    fields: dict[str, Any] = {"source.url": args.src, "target.url": args.dst}
    if args.source_format:
        fields["source.format"] = args.source_format
    if args.name:
        fields["target.name"] = args.name
    if args.max_episodes:
        fields["max_episodes"] = args.max_episodes
    if args.image_format:
        fields["images.encoding"] = args.image_format
    if args.mapping:
        fields["mapping_file"] = args.mapping
    if getattr(args, "to", None):
        fields["target.format"] = args.to
    if getattr(args, "source_name", None):
        fields["source.options.name"] = args.source_name
    if getattr(args, "split", None):
        fields["source.options.splits"] = [x.strip() for x in args.split.split(",") if x.strip()]
    if getattr(args, "val_fraction", None) is not None:
        fields["splits.val_fraction"] = args.val_fraction
    if getattr(args, "fps", None):
        fields["source.options.fps"] = args.fps
    if getattr(args, "instruction", None) is not None:
        fields["source.instruction"] = args.instruction
    if getattr(args, "shared_destination", False):
        fields["target.shared"] = True
    cfg = load_config(args.config, args.set)
    data = cfg.model_dump(by_alias=True)
    for dotted, value in fields.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return type(cfg).model_validate(data)


def _executor(args: argparse.Namespace):
    if args.mode == "in-process" and not args.actors and not args.max_actors and not args.address:
        return None
    from robo_ray.ray_exec.executor import RayExecutor  # only here: the core never imports Ray

    executor = RayExecutor(mode=args.mode if args.mode != "in-process" else "safe", actors=args.actors,
                           address=args.address, max_actors=args.max_actors)
    _RAY_EXECUTORS.append(executor)
    return executor


_RAY_EXECUTORS: list[Any] = []  # the Ray executors this process made (entry() asks whether one started Ray)
_OWN_PROCESS = False  # set by entry(): the process is robo-ray's own (not a test's or a user's calling main())


def cmd_run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    if args.dry_run:
        return cmd_dry_run(cfg)
    if getattr(args, "more_sources", None):  # `run --source SRC2 ...` (convert has no --source)
        return _run_sources(args, cfg)
    executor = _executor(args)
    if executor is not None:  # Ray comes up (~6 s) while the pipeline's modules import and Discover runs
        executor.start()
    elif _OWN_PROCESS:  # the console script's in-process run: no pandas object ever reaches pyarrow here
        from robo_ray.arrow_pandas import defer_pandas_import

        defer_pandas_import()
    from robo_ray.stages.pipeline import run_pipeline

    bar = _progress_printer()
    with bar.lines_above() if bar else contextlib.nullcontext(None) as stderr:
        outcome = run_pipeline(cfg, overwrite=args.overwrite, executor=executor, progress=bar,
                               stderr=stderr, archive=args.archive, resume=args.resume)
    print(redact(outcome.message))
    _print_reports(outcome)
    return outcome.exit_code


def _run_sources(args: argparse.Namespace, cfg: Any) -> int:
    """`robo-ray run SRC DST --source SRC2 ...`: the sources' union as one dataset (robo_ray.data, on Ray)."""
    from robo_ray.data.several import write_sources  # only here: the core never imports Ray

    outcome = write_sources(cfg, args.more_sources, address=args.address, num_cpus=args.actors,
                            overwrite=args.overwrite, resume=args.resume)
    print(redact(outcome.message))
    _print_reports(outcome)
    return outcome.exit_code


def _print_reports(outcome: Any) -> None:
    """Where the reports are (report.html only when it was written)."""
    html = f", {outcome.report_html}" if outcome.report_html else " (report.html not written: see final_report.md)"
    print(redact(f"reports: {outcome.out_url.rstrip('/')}/final_report.md{html}"))


def cmd_dry_run(cfg: Any) -> int:
    from robo_ray.readers import open_reader
    from robo_ray.stages.discover import summarize
    from robo_ray.stages.target_setup import make_writer, resolve_mapping
    from robo_ray.stages.plan import estimate_episode_bytes

    reader = open_reader(cfg.source.url, cfg.source.format, cfg.source.storage_options, cfg.source.options)
    inv = reader.discover()
    writer = make_writer(cfg, resolve_mapping(cfg, inv))
    units = writer.plan(inv.refs, inv.features, cfg.plan.target_shard_mb, cfg.plan.min_shards,
                        cfg.plan.max_unit_episodes)
    est = sum(estimate_episode_bytes(r, inv.features) for r in inv.refs)
    print(summarize(inv))
    print(f"would write {len(units)} units ({writer.title}), about {est / 1e6:.1f} MB, to "
          f"{cfg.target.url or '(no destination)'}")
    return 0


def cmd_discover(args: argparse.Namespace) -> int:
    from robo_ray.readers import open_reader
    from robo_ray.stages.discover import summarize, write_discover_outputs
    from robo_ray.storage import url_to_fs

    reader = open_reader(args.src, args.source_format)
    inv = reader.discover()
    print(summarize(inv))
    if args.dst and not args.dry_run:
        fs, root = url_to_fs(args.dst)
        fs.makedirs(root, exist_ok=True)
        write_discover_outputs(fs, root, inv)
        print(f"wrote {args.dst}/inventory.json and episode_index.csv")
    errors = [f for f in inv.findings if f.level == "error"]
    return 3 if errors else 0


def _load_output(dst: str) -> dict[str, Any]:
    """A finished output folder: its mapping, ledger, job config, and the source re-discovered."""
    from robo_ray.config import JobConfig
    from robo_ray.readers import open_reader
    from robo_ray.stages.journal import read_ledger
    from robo_ray.stages.spec import load_mapping
    from robo_ray.storage import join, url_to_fs

    fs, root = url_to_fs(dst)
    for name in ("mapping.yaml", "inventory.json", "ledger.json"):
        if not fs.exists(join(root, name)):
            raise UsageError(f"{dst} is not a robo-ray output folder ({name} missing)")
    mapping = load_mapping(fs.cat_file(join(root, "mapping.yaml")).decode(), "mapping.yaml")
    inv_json = json.loads(fs.cat_file(join(root, "inventory.json")))
    ledger = read_ledger(fs, root) or {}  # ledger.json + the journal parts of a run killed on an object store
    job = json.loads(fs.cat_file(join(root, "job.json"))) if fs.exists(join(root, "job.json")) else {}
    cfg = JobConfig.model_validate(job) if job else JobConfig()
    reader = open_reader(inv_json["dataset_root"], cfg.source.format, cfg.source.storage_options, cfg.source.options)
    inv = reader.discover()
    if cfg.max_episodes:
        inv.refs = inv.refs[:cfg.max_episodes]
    writer = writer_class(cfg.target.format)(dst, mapping, cfg.target.storage_options, cfg.target.options)
    return {"fs": fs, "root": root, "mapping": mapping, "ledger": ledger, "cfg": cfg, "reader": reader, "inv": inv,
            "writer": writer}


def cmd_spec(args: argparse.Namespace) -> int:
    from robo_ray.readers import open_reader
    from robo_ray.stages.discover import summarize, write_discover_outputs
    from robo_ray.stages.target_setup import resolve_mapping
    from robo_ray.stages.spec import write_spec_outputs
    from robo_ray.storage import url_to_fs

    cfg = _config(args)
    inv = open_reader(cfg.source.url, cfg.source.format, cfg.source.storage_options, cfg.source.options).discover()
    mapping = resolve_mapping(cfg, inv)
    fs, root = url_to_fs(cfg.target.url, cfg.target.storage_options)
    fs.makedirs(root, exist_ok=True)
    write_discover_outputs(fs, root, inv)
    write_spec_outputs(fs, root, mapping, inv)
    print(summarize(inv))
    print(f"wrote {args.dst}/mapping.md and mapping.yaml (edit, then: robo-ray run SRC DST2 --mapping "
          f"{args.dst}/mapping.yaml)")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    args.set = [*args.set, "validate.sample_episodes=0", "validate.tfds_readback=false"]
    code = cmd_run(args)
    print(f"next: robo-ray validate {args.dst} && robo-ray publish {args.dst}")
    return code


def cmd_publish(args: argparse.Namespace) -> int:
    from robo_ray.stages.finish import validate_and_publish
    from robo_ray.stages.run_log import RunLog

    out = _load_output(args.dst)
    cfg = out["cfg"]
    if args.no_tfds:
        cfg.validate_.tfds_readback = False
    quarantined = [q for s in out["ledger"].get("shards", []) for q in s.get("quarantined", [])]
    fs, root = out["fs"], out["root"]

    def previous(name: str) -> list[str]:
        path = f"{root}/logs/{name}"
        return fs.cat_file(path).decode().splitlines() if fs.exists(path) else []

    log = RunLog(lines=[ln for ln in previous("convert.log") if ln], errors=[ln for ln in previous("errors.log") if ln])
    outcome = validate_and_publish(cfg, out["writer"], out["inv"], out["reader"], out["ledger"], log,
                                   "publish (re-run)", 0.0, quarantined, args.archive)
    print(outcome.message)
    _print_reports(outcome)
    return outcome.exit_code


def cmd_validate(args: argparse.Namespace) -> int:
    from robo_ray.stages.validate import Validator
    from robo_ray.stages.validation_report import write_validation_outputs

    out = _load_output(args.dst)
    fs, root, mapping = out["fs"], out["root"], out["mapping"]
    check_units = None
    if args.actors or args.address:  # the units re-read in parallel on Ray (ray_exec/verify_pass.py)
        from robo_ray.ray_exec.executor import RayExecutor
        from robo_ray.ray_exec.verify_pass import ray_unit_checks

        executor = RayExecutor(address=args.address, num_cpus=args.actors)
        _RAY_EXECUTORS.append(executor)
        check_units = ray_unit_checks(executor.connect)
    cfg = out["cfg"]
    res = Validator(out["writer"], out["inv"], out["reader"], out["ledger"], cfg.validate_.sample_episodes,
                    cfg.validate_.min_psnr_db, loader_readback=not args.no_tfds,
                    allow_nonfinite=cfg.convert.nan_policy == "allow", check_units=check_units,
                    readback_shards=cfg.validate_.readback_shards).run()
    write_validation_outputs(fs, root, res, mapping.dataset_name, 0.0)
    for c in res.checks:
        if c.status != "passed":
            print(f"validation {c.status}: {c.name}: {c.detail}", file=sys.stderr)
    print(f"validation {'passed' if res.passed else 'FAILED'}: {res.episodes_written} episodes, "
          f"{res.steps_written} steps; checks: {res.tally()}")
    return 0 if res.passed else 3


def cmd_demo(args: argparse.Namespace) -> int:
    from robo_ray.config import load_config
    from robo_ray.stages.pipeline import run_pipeline

    example = Path(__file__).resolve().parent.parent / "examples" / "lerobot_v30_pusher"
    if not example.exists():
        raise UsageError(f"bundled example not found at {example}")
    cfg = load_config(None, None, **{"source.url": str(example), "target.url": args.dst})
    bar = _progress_printer()
    with bar.lines_above() if bar else contextlib.nullcontext(None) as stderr:
        outcome = run_pipeline(cfg, overwrite=True, progress=bar, stderr=stderr)
    rel = Path(outcome.dataset_dir)
    print(outcome.message)
    print(f"\nreports: {args.dst}/final_report.md, {args.dst}/validation_report.md")
    print("load it:\n  import tensorflow_datasets as tfds\n"
          f"  ds = tfds.builder_from_directory('{rel}').as_dataset(split='train')")
    return outcome.exit_code


def _progress_printer():
    """On a terminal, the convert bar (robo_ray/progress_bar.py: per episode, frames/s, ETA, quarantined; other
    stderr lines above it); else None (the Ray executor prints plain periodic status lines)."""
    from robo_ray.progress_bar import progress_bar

    return progress_bar(sys.stderr)


class _OneLine(logging.Formatter):
    """A log record as one stderr line (no traceback), secrets masked."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(f"{record.levelname.lower()}: {record.getMessage()}".replace("\n", " "))


DEBUG_ENV = "ROBO_RAY_DEBUG"


def setup_logging(debug: bool) -> None:
    """robo-ray's own log records (warnings and up) on stderr. Without --debug: one line each, and a record carrying
    an exception is left out, because the problem is already reported in its own line with a stable code (an
    episode's unexpected error is its `quarantined[EP999]` line). With --debug: the records with tracebacks.

    The choice is exported as ROBO_RAY_DEBUG=1|0 so that worker processes the run starts can make the same one
    (`setup_logging(os.environ.get(DEBUG_ENV) == "1")`)."""
    os.environ[DEBUG_ENV] = "1" if debug else "0"
    handler = logging.StreamHandler(sys.stderr)
    if debug:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(_OneLine())
        handler.addFilter(lambda record: not record.exc_info)
    logger = logging.getLogger("robo_ray")
    logger.addHandler(handler)
    logger.propagate = False


COMMANDS = {"run": cmd_run, "discover": cmd_discover, "spec": cmd_spec, "convert": cmd_convert,
            "validate": cmd_validate, "publish": cmd_publish, "demo": cmd_demo}


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    args = build_parser().parse_args(argv)
    setup_logging(args.debug)
    try:
        return COMMANDS[args.command](args)
    except RoboRayError as exc:
        if args.debug:
            raise
        print(redact(exc.line()), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error[RR100]: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # last resort: still one line unless --debug
        if args.debug:
            raise
        print(redact(f"error[RR001]: unexpected {type(exc).__name__}: {exc} (rerun with --debug for a traceback)"),
              file=sys.stderr)
        return 1


def entry() -> None:
    """The `robo-ray` console script: `main`, then exit at once, without the interpreter's teardown.

    Everything is written and committed when `main` returns; the teardown only frees memory, and it can abort a
    finished run: a native thread of Arrow's (a parquet read-ahead after a failed read) still alive while the
    interpreter finalizes ends in std::terminate ("terminate called without an active exception", SIGABRT, exit -6
    instead of 3; apache/arrow#34314, seen once in ~100 runs of the bad-input corpus). So output is flushed, logging
    shut down and the process `os._exit`s with main's code. A process that started its own Ray instance also skips
    Ray's atexit shutdown (2-3 s stopping the head processes and workers one by one): Ray's processes, all under
    this process, are killed with their agents and workers (`RayExecutor.stop_now`), and waited for; one that
    joined a cluster disconnects its driver first."""
    global _OWN_PROCESS
    _OWN_PROCESS = True
    exit_now(main())


def exit_now(code: int) -> None:
    """End this process with `code` once everything is written: flush, shut logging down, stop (or disconnect from)
    Ray, then `os._exit` (no interpreter teardown; see `entry`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    own = [ex for ex in _RAY_EXECUTORS if ex.owns_instance()]
    if own:
        own[0].stop_now()
    elif _RAY_EXECUTORS:
        _RAY_EXECUTORS[0].disconnect()
    os._exit(code)


if __name__ == "__main__":
    entry()
