"""Secrets kept out of configuration files: indirection as Kafka's config providers do it, and
a warning for a secret file others can read.

A value in `conf/clusters.yaml` (any `properties` or `admin_properties` value) may be, or
contain, a reference that is resolved when the configuration is loaded:

* ``${env:NAME}``: the environment variable NAME (an error if unset);
* ``${file:PATH:KEY}``: KEY of the Java-properties file PATH (``key=value`` lines, as Kafka's
  FileConfigProvider reads them); a relative PATH is relative to the conf folder.

For example::

    sasl.jaas.config: >-
      org.apache.kafka.common.security.scram.ScramLoginModule required
      username="uatu" password="${file:/run/secrets/kafka.properties:password}";

A secret file (a properties file above, the control plane's auth file, a token file) that is
group- or world-readable gets a warning naming it: it should be 0600 (or 0640 for a
dedicated group), as ssh insists for its keys.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from core.errors import ConfigError

log = logging.getLogger("uatu.secrets")

_REFERENCE = re.compile(r"\$\{(env|file):([^}]*)\}")


def warn_if_readable_by_others(path: Path, what: str) -> bool:
    """Log a warning when `path` is group- or world-readable; True if it was."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            "%s %s is readable by others (mode %03o); chmod 600 it", what, path, mode & 0o777
        )
        return True
    return False


def read_secret_file(path: Path, what: str) -> str:
    """The text of a secret file (UTF-8), warning when others can read it."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise ConfigError(str(path), f"{what}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), f"{what}: not UTF-8 text") from None
    warn_if_readable_by_others(path, what)
    return text


def read_properties(path: Path) -> dict[str, str]:
    """A Java-properties file's ``key=value`` (or ``key: value``) lines; # and ! comment."""
    values = {}
    for line in read_secret_file(path, "secret properties file").splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        pair = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        key, value = (pair.group(1), pair.group(2)) if pair else (line, "")
        values[key] = value
    return values


def resolve(value: str, field: str, base_dir: Path, env: Mapping[str, str] | None = None) -> str:
    """`value` with every ${env:...} and ${file:PATH:KEY} reference replaced.

    ConfigError names `field` and the reference (never a resolved value) when one cannot be
    resolved.
    """
    env = os.environ if env is None else env
    files: dict[Path, dict[str, str]] = {}

    def replace(match: re.Match[str]) -> str:
        kind, argument = match.group(1), match.group(2)
        if kind == "env":
            if argument not in env:
                raise ConfigError(field, f"${{env:{argument}}}: environment variable not set")
            return env[argument]
        path_text, sep, key = argument.rpartition(":")
        if not sep or not path_text or not key:
            raise ConfigError(field, f"${{file:{argument}}}: expected ${{file:PATH:KEY}}")
        path = Path(path_text)
        if not path.is_absolute():
            path = base_dir / path
        if path not in files:
            files[path] = read_properties(path)
        if key not in files[path]:
            raise ConfigError(field, f"${{file:{argument}}}: no key {key!r} in {path}")
        return files[path][key]

    return _REFERENCE.sub(replace, value)
