"""What the commands share: the --config flag and loading the config with flag overrides."""

from __future__ import annotations

import argparse


def add_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML or YAML config file (see README); flags override it")


def load_config(args, overrides: dict | None = None, absolute: bool = True):
    """The config from --config and the flags (raises ConfigError naming the file or key)."""
    from pipeline import config as config_lib

    config = config_lib.load(args.config, overrides)
    return config_lib.absolutize(config) if absolute else config
