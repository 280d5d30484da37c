"""The flags of ``infer serve`` that read files: TLS, batching, the model config."""

from __future__ import annotations

from typing import Any

import click

__all__ = ["batching_options", "is_loopback", "tls_files"]


def tls_files(certfile: str | None, keyfile: str | None) -> tuple[bytes, bytes] | None:
    """(key, certificate chain) read from the TLS flags, or None when TLS is off."""
    if (certfile is None) != (keyfile is None):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together (TLS needs "
                               "both the certificate and its key)")
    if certfile is None or keyfile is None:
        return None
    pems = []
    for path, flag, marker in ((keyfile, "--ssl-keyfile", b"PRIVATE KEY-----"),
                               (certfile, "--ssl-certfile", b"BEGIN CERTIFICATE-----")):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise click.BadParameter(f"cannot read {path}: {e.strerror or e}",
                                     param_hint=f"'{flag}'") from None
        if marker not in data:
            raise click.BadParameter(f"{path} is not a PEM file holding a "
                                     f"{'private key' if flag == '--ssl-keyfile' else 'certificate'}",
                                     param_hint=f"'{flag}'")
        pems.append(data)
    return pems[0], pems[1]


def is_loopback(host: str) -> bool:
    import ipaddress  # here: only with --admin-token

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def batching_options(enabled: bool, path: str | None) -> Any:
    """The BatchingOptions of --enable-batching (and its file), or None when off."""
    if path is not None and not enabled:
        raise click.UsageError("--batching-parameters-file takes effect only with "
                               "--enable-batching")
    if not enabled:
        return None
    from ckptsync.errors import InvalidArgumentError  # here so `infer --help` stays fast
    from ckptsync.serving.batching import BatchingOptions  # the same

    if path is None:
        return BatchingOptions()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return BatchingOptions.from_text(text, path)
    except (OSError, UnicodeDecodeError) as e:
        raise click.BadParameter(f"cannot read {path}: {e}",
                                 param_hint="'--batching-parameters-file'") from None
    except InvalidArgumentError as e:
        raise click.BadParameter(e.message, param_hint="'--batching-parameters-file'") from None


def model_config_entries(path: str, conflicting: dict[str, Any]) -> Any:
    """The models of ``--model-config-file`` (a list of ``ModelConfigEntry``);
    ``conflicting`` maps the one-model flags to their values (each must be unset)."""
    given = [flag for flag, value in conflicting.items() if value is not None]
    if given:
        raise click.UsageError(f"--model-config-file names the models (name, base_path, "
                               f"model_file, policy); drop {', '.join(given)}")
    from ckptsync.errors import InvalidArgumentError  # here so `infer --help` stays fast
    from ckptsync.serving.model_config import read_model_config_file  # the same

    try:
        return read_model_config_file(path)
    except InvalidArgumentError as e:
        raise click.BadParameter(e.message, param_hint="'--model-config-file'") from None
