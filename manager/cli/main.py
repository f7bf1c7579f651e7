"""`kfed`: validate, convert and simulate Kueue manifests; run and inspect a federation.

Also installed as `kubectl-kfed`, so `kubectl kfed ...` works as a kubectl plugin.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from manager.api import constants as c
from manager.api import conversion, crdgen
from manager.cli.files import checkout_crds_dir, load_paths


def cmd_validate(args: argparse.Namespace) -> int:
    loaded = load_paths(args.filename)
    for error in loaded.errors:
        print(error, file=sys.stderr)
    if loaded.errors:
        print(f"{len(loaded.errors)} error(s) in {len(loaded.objects) + len(loaded.errors)} object(s)", file=sys.stderr)
        return 1
    for document in loaded.skipped:
        print(f"{document.source}[{document.index}]: skipped {document.data.get('apiVersion')} {document.kind}", file=sys.stderr)
    print(f"{len(loaded.objects)} object(s) valid")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    loaded = load_paths(args.filename)
    if loaded.errors:
        for error in loaded.errors:
            print(error, file=sys.stderr)
        return 1
    documents = [document for document, _ in loaded.objects] + loaded.skipped
    documents.sort(key=lambda d: (str(d.source), d.index))
    converted = []
    for document in documents:
        try:
            converted.append(conversion.convert(document.data, args.to))
        except conversion.ConversionError as err:
            print(f"{document.source}[{document.index}]: {err}", file=sys.stderr)
            return 1
    sys.stdout.write(yaml.safe_dump_all(converted, sort_keys=False))
    return 0


def crd_drift(directory: Path, files: dict[str, str]) -> list[str]:
    """How the CRD files in `directory` differ from `files` (name to text), one line per file."""
    problems = []
    for name, text in files.items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path}: out of date with the models")
    if directory.is_dir():
        problems += [f"{p}: not generated from any model" for p in sorted(directory.glob("*.yaml")) if p.name not in files]
    return problems


def crd_targets(args: argparse.Namespace) -> list[tuple[Path, dict[str, str]]]:
    """Where `kfed crds` writes: crds/ (with its kustomization) and, in a checkout, the Helm
    chart's crds/ (the CRDs alone: Helm applies every file there as is)."""
    files = crdgen.render_all()
    if args.dir:
        return [(Path(args.dir), files)]
    # In a checkout crds/ sits beside the manager package; elsewhere use the working directory.
    crds_dir = checkout_crds_dir()
    if crds_dir is None:
        return [(Path("crds"), files)]
    chart_crds = {name: text for name, text in files.items() if name != "kustomization.yaml"}
    return [(crds_dir, files), (crds_dir.parent / "deploy" / "helm" / "kfed" / "crds", chart_crds)]


def cmd_crds(args: argparse.Namespace) -> int:
    targets = crd_targets(args)
    if args.check:
        problems = [problem for directory, files in targets for problem in crd_drift(directory, files)]
        if problems:
            for problem in problems:
                print(problem, file=sys.stderr)
            print("run `kfed crds` to regenerate", file=sys.stderr)
            return 1
        for directory, files in targets:
            print(f"{len(files)} generated file(s) in {directory} match the models")
        return 0
    for directory, files in targets:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
        print(f"wrote {len(files)} generated file(s) to {directory}")
    return 0


def cmd_rbac(args: argparse.Namespace) -> int:
    """Write the job kinds' rules into deploy/ and the Helm chart from the adapters, or --check."""
    from manager.engine.integrations import rbacgen
    from manager.engine.integrations.registry import ADAPTERS

    crds_dir = checkout_crds_dir()
    root = Path(args.dir) if args.dir else (crds_dir.parent if crds_dir is not None else Path("."))
    texts = {path: (root / path).read_text(encoding="utf-8") for path, _ in rbacgen.TARGETS if (root / path).is_file()}
    missing = [path for path, _ in rbacgen.TARGETS if path not in texts]
    if missing:
        print(f"{root}: not a kfed checkout (missing {', '.join(missing)})", file=sys.stderr)
        return 1
    try:
        if args.check:
            problems = rbacgen.drift(texts, ADAPTERS)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print("run `kfed rbac` to regenerate", file=sys.stderr)
                return 1
            print(f"the job kinds' rules in {len(texts)} manifests match the {len(ADAPTERS)} adapters")
            return 0
        for path, side in rbacgen.TARGETS:
            (root / path).write_text(rbacgen.regenerate(texts[path], ADAPTERS, side, where=path), encoding="utf-8")
    except rbacgen.MarkersMissingError as err:
        print(err, file=sys.stderr)
        return 1
    print(f"wrote the job kinds' rules of {len(ADAPTERS)} adapters into {len(texts)} manifests")
    return 0


# One runnable example per command, shown at the end of its --help.
EXAMPLES = {
    "": "kfed jobs -n team-a --state pending",
    "validate": "kfed validate -f queues.yaml -f job.yaml",
    "convert": "kfed convert --to v1beta1 -f queues.yaml",
    "crds": "kfed crds --check",
    "rbac": "kfed rbac --check",
    "simulate": "kfed simulate -f queues.yaml -f job.yaml --cycles 5",
    "status": "kfed status",
    "clusters": "kfed clusters -o wide",
    "queues": "kfed queues -A",
    "jobs": "kfed jobs -n team-a --state pending -l app=train",
    "workloads": "kfed workloads -A -o yaml",
    "logs": "kfed logs job/train -n team-a -f",
    "dashboard": "kfed dashboard --port 8765",
    "submit": "kfed submit -f job.yaml --queue user-queue -n team-a --wait",
    "cancel": "kfed cancel job/train -n team-a --dry-run",
    "explain": "kfed explain job/train -n team-a",
    "register": "kfed register worker1 --kubeconfig worker1.kubeconfig --dry-run",
    "unregister": "kfed unregister worker1",
    "dev": "kfed dev up --workers 2 --jobs",
    "dev up": "kfed dev up --workers 2 --jobs",
    "dev down": "kfed dev down",
    "dev status": "kfed dev status",
}

# Flags every fleet command takes, accepted before the command too (as kubectl accepts them).
GLOBAL_FLAGS = {"--kubeconfig": True, "--context": True, "-n": True, "--namespace": True, "-o": True, "--output": True}


def version_text() -> str:
    try:
        version = importlib.metadata.version("kfed")
    except importlib.metadata.PackageNotFoundError:
        version = "dev (a checkout that was never installed)"
    served = ", ".join(f"{c.GROUP}/{v}" + (" (stored)" if v == c.STORAGE_VERSION else "") for v in c.SERVED_VERSIONS)
    return f"kfed {version}\nKueue API served: {served}"


def hoist_global_flags(argv: Sequence[str], commands: Sequence[str]) -> list[str]:
    """Move the global flags given before the command to after it, where each command's own
    parser reads them: `kfed --kubeconfig F status` is `kfed status --kubeconfig F`."""
    hoisted: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, _ = arg.partition("=")
        if arg in commands or (arg.startswith("--") and flag not in GLOBAL_FLAGS):
            break
        if flag in GLOBAL_FLAGS and (eq or not GLOBAL_FLAGS[flag]):
            hoisted.append(arg)
            i += 1
        elif flag in GLOBAL_FLAGS and i + 1 < len(argv):
            hoisted += [arg, argv[i + 1]]
            i += 2
        elif len(arg) > 2 and arg[:2] in GLOBAL_FLAGS and not arg.startswith("--"):  # -nteam-a, -ojson
            hoisted.append(arg)
            i += 1
        else:
            break
    if not hoisted or i >= len(argv) or argv[i] not in commands:
        return list(argv)
    return [argv[i], *argv[i + 1 :], *hoisted]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse has no public way to list subparsers
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _add_examples(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    for name, sub in _subcommands(parser).items():
        path = f"{prefix} {name}".strip()
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
        sub.epilog = f"example:\n  {EXAMPLES[path]}"
        _add_examples(sub, path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kfed",
        description=__doc__.splitlines()[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"example:\n  {EXAMPLES['']}\n\n"
        "--kubeconfig, --context, -n and -o may also come before the command, as with kubectl.\n"
        "Run `kfed COMMAND --help` for a command's options and an example.",
    )
    parser.add_argument(
        "--version", action="version", version=version_text(), help="print kfed's version and the Kueue API versions it serves"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = commands.add_parser("validate", help="check manifests against Kueue's schema and rules")
    validate.add_argument("-f", "--filename", action="append", required=True, help="file, directory or - (repeatable)")
    validate.set_defaults(func=cmd_validate)

    convert = commands.add_parser("convert", help="rewrite Kueue manifests in another API version")
    convert.add_argument("-f", "--filename", action="append", required=True, help="file, directory or - (repeatable)")
    convert.add_argument("--to", choices=conversion.VERSIONS, required=True)
    convert.set_defaults(func=cmd_convert)

    crds = commands.add_parser("crds", help="generate crds/ from the models, or --check for drift")
    crds.add_argument("--check", action="store_true", help="fail if crds/ (or the Helm chart's crds/) differs from the models")
    crds.add_argument("--dir", help="CRD directory (default: the checkout's crds/)")
    crds.set_defaults(func=cmd_crds)
    rbac = commands.add_parser("rbac", help="write the job kinds' RBAC into deploy/ from the adapters, or --check for drift")
    rbac.add_argument("--check", action="store_true", help="fail if a manifest's job-kind rules differ from the adapters")
    rbac.add_argument("--dir", help="the checkout to read and write (default: the one this kfed runs from)")
    rbac.set_defaults(func=cmd_rbac)

    from manager.cli import simulate

    simulate.add_command(commands)

    from manager.cli import fleet

    fleet.add_commands(commands)

    from manager.cli import explain, register

    register.add_commands(commands)
    explain.add_command(commands)

    from manager.cli import logs

    logs.add_command(commands)

    from manager.cli.dashboard import command as dashboard

    dashboard.add_command(commands)

    from manager.cli import dev  # imported here: it pulls in the cluster harness

    dev.add_commands(commands)
    _add_examples(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(hoist_global_flags(sys.argv[1:] if argv is None else argv, list(_subcommands(parser))))
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
