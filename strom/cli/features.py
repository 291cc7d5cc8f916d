"""``strom features``: the cluster's feature levels, as kafka-features.sh shows and sets them.

``describe`` prints one line per feature the broker asked supports, with the level
the cluster finalized (ApiVersions v3: supported and finalized features, and the
metadata offset they were read at). ``upgrade --feature NAME=LEVEL`` and ``downgrade
--feature NAME=LEVEL`` (repeatable; ``--unsafe`` for an unsafe downgrade) send
UpdateFeatures (key 57, v1), which the broker forwards to the active controller;
``--dry-run`` asks the controller to check without writing. ``share.version`` turns
share groups on (1) or off (0). Against Strom or Kafka. A wrong ``--feature`` is one
line and exit 2; a refused change prints the broker's reason and exits 1.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.update_features.v1 import request as update_features
from kio.static.primitive import i8, i16, i32Timedelta

from strom.cli import wire
from strom.cli.common import EXIT_ERROR, ToolError, add_bootstrap
from strom.cli.properties_file import add_config_file_option, client_security
from strom.protocol.errors import ErrorCode

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "features",
        help="describe, upgrade or downgrade the cluster's features (like kafka-features.sh)",
    )
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "admin client")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser(
        "describe", help="the supported and finalized levels of each feature"
    )
    _bootstrap_after(describe)
    for name in ("upgrade", "downgrade"):
        action = actions.add_parser(name, help=f"{name} features to the levels given")
        _bootstrap_after(action)
        action.add_argument(
            "--feature",
            action="append",
            required=True,
            type=_feature,
            metavar="NAME=LEVEL",
            help="a feature and its level, e.g. share.version=1 (repeatable)",
        )
        action.add_argument("--dry-run", action="store_true", help="check, change nothing")
        if name == "downgrade":
            action.add_argument(
                "--unsafe", action="store_true", help="a downgrade that may lose metadata"
            )
    parser.set_defaults(run=run, parser=parser)


def _bootstrap_after(action: argparse.ArgumentParser) -> None:
    """``--bootstrap-server`` accepted after the action too (kafka-features.sh takes it
    either side)."""
    action.add_argument(
        "--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT", help="as above"
    )


def _feature(text: str) -> tuple[str, int]:
    name, equals, level = text.partition("=")
    if not equals or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=LEVEL")
    try:
        number = int(level)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the level of {name} must be a number") from None
    if not 0 <= number <= 32767:
        raise argparse.ArgumentTypeError(f"the level of {name} must be between 0 and 32767")
    return name.strip(), number


def run(args: argparse.Namespace) -> int:
    security = client_security(args)
    if args.action == "describe":
        return _describe(args.bootstrap_server, security)
    return _update(args, security)


def _describe(bootstrap: str, security: Any) -> int:
    response = wire.send(
        bootstrap,
        ApiVersionsRequest(client_software_name="strom-tools", client_software_version="1"),
        "ask for the features",
        security,
    )
    if response.error_code != ErrorCode.none:
        raise ToolError(f"cannot ask for the features: {wire.error_name(response.error_code)}")
    finalized = {f.name: int(f.max_version_level) for f in response.finalized_features}
    for feature in sorted(response.supported_features, key=lambda f: f.name):
        print(
            f"Feature: {feature.name}\tSupportedMinVersion: {feature.min_version}\t"
            f"SupportedMaxVersion: {feature.max_version}\t"
            f"FinalizedVersionLevel: {finalized.get(feature.name, 0)}\t"
            f"Epoch: {response.finalized_features_epoch}"
        )
    return 0


def _update(args: argparse.Namespace, security: Any) -> int:
    upgrade = args.action == "upgrade"
    kind = UPGRADE if upgrade else (UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE)
    request = update_features.UpdateFeaturesRequest(
        timeout=TIMEOUT,
        feature_updates=tuple(
            update_features.FeatureUpdateKey(
                feature=name, max_version_level=i16(level), upgrade_type=i8(kind)
            )
            for name, level in args.feature
        ),
        validate_only=args.dry_run,
    )
    response = wire.send(args.bootstrap_server, request, f"{args.action} features", security)
    verb = "upgraded" if upgrade else "downgraded"
    failed = response.error_code != ErrorCode.none
    results = {r.feature: r for r in response.results}
    for name, level in args.feature:
        result = results.get(name)
        code = result.error_code if result is not None else response.error_code
        if code == ErrorCode.none and not failed:
            said = f"can be {verb}" if args.dry_run else f"was {verb}"
            print(f"{name} {said} to {level}.")
            continue
        reason = (result.error_message if result is not None else None) or (
            response.error_message or wire.error_name(ErrorCode(code))
        )
        print(f"Could not {args.action} {name} to {level}. {reason}")
    return EXIT_ERROR if failed else 0
