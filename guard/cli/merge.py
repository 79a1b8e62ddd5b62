"""``guard merge``: join the results files of a sharded run into one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = subparsers.add_parser(
        "merge",
        help="join the results files of a sharded run into one",
        description="guard merge r1.json r2.json ... --json all.json. Refuses (exit 2) files "
        "of different suites, commits, schema versions or shard plans, and a case in two "
        "files. The merged file is a results file: reports, verdicts and the exit code are "
        "those of one run (0 pass, 1 a check failed, 2 bad input, 3 guard failed).",
    )
    m.add_argument("files", nargs="+", metavar="RESULTS.json")
    m.add_argument("--json", metavar="PATH", help="write the merged results file")
    m.add_argument("--junit", metavar="PATH", help="write JUnit XML")
    m.add_argument("--markdown", metavar="PATH", help="write a Markdown summary")
    m.add_argument("--html", metavar="PATH", help="write an HTML report")
    m.add_argument(
        "--allow-missing",
        action="store_true",
        help="merge even when a shard's file is missing: its cases become error results (exit 3)",
    )
    m.add_argument("--quiet", action="store_true", help="do not print the console table")
    m.add_argument(
        "--tracking-uri",
        metavar="URI",
        help="also put the merged results on the shards' invocation run there "
        "(verdict, counts, results.json)",
    )
    m.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    from guard import report
    from guard.core.errors import EXIT_BAD_INPUT
    from guard.results.documents import ResultsDocument
    from guard.run.merge import merge_documents

    outputs = {
        "--json": args.json,
        "--junit": args.junit,
        "--markdown": args.markdown,
        "--html": args.html,
    }
    report.check_outputs(outputs)  # a bad output path is exit 2 before any file is read
    doc = merge_documents([Path(f) for f in args.files], allow_missing=args.allow_missing)
    problems = report.write_reports(dict(doc), outputs)
    for line in problems:
        print(f"guard: error: {line}", file=sys.stderr)
    if not args.quiet:
        report.render_console(doc)
    typed = ResultsDocument.from_json(doc)
    if args.tracking_uri:
        from guard.track.invocation import record_merged

        run_id = record_merged(args.tracking_uri, typed)
        print(f"recorded the merged results on invocation run {run_id} at {args.tracking_uri}")
    code = int(typed.exit_code or 0)  # merge_documents sets it
    return max(code, EXIT_BAD_INPUT) if problems else code
