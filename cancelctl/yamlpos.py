"""YAML loading that remembers where every value came from (file, line, column).

Error messages must point at `file:line:col` of the offending field, so we compose the YAML node
tree ourselves and record the mark of every mapping key and sequence item by its path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Location:
    file: str
    line: int  # 1-based
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


Path_ = tuple  # a path of mapping keys / sequence indices


class YamlSyntaxError(Exception):
    def __init__(self, location: Location, message: str):
        super().__init__(f"{location}: {message}")
        self.location = location
        self.message = message


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-6` as a float (YAML 1.1 wants `1.0e-6`; users write `1e-6`)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_yaml(text: str, file: str) -> tuple[Any, dict[Path_, Location]]:
    """Parse `text`; return (data, positions) where positions maps a key path to its location."""
    positions: dict[Path_, Location] = {}
    try:
        node = yaml.compose(text, Loader=_Loader)
        data = None if node is None else _construct(node, (), file, positions)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file, 1, 1)
        raise YamlSyntaxError(loc, f"YAML syntax error: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:  # pragma: no cover - non-marked yaml errors are rare
        raise YamlSyntaxError(Location(file, 1, 1), f"YAML error: {exc}") from None
    return data, positions


def load_yaml_file(path: Path | str) -> tuple[Any, dict[Path_, Location]]:
    path = Path(path)
    return load_yaml(path.read_text(encoding="utf-8"), str(path))


def _loc(node: yaml.Node, file: str) -> Location:
    return Location(file, node.start_mark.line + 1, node.start_mark.column + 1)


def _construct(node: yaml.Node, path: Path_, file: str, positions: dict) -> Any:
    positions.setdefault(path, _loc(node, file))
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        loader = _Loader("")
        loader.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if isinstance(key, (list, dict, set)):
                raise YamlSyntaxError(_loc(key_node, file), "a mapping key must be a plain scalar")
            if key in out:
                raise YamlSyntaxError(_loc(key_node, file), f"duplicate key {key!r}")
            positions[path + (key,)] = _loc(key_node, file)
            out[key] = _construct(value_node, path + (key,), file, positions)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, path + (i,), file, positions) for i, item in enumerate(node.value)]
    return _Loader("").construct_object(node)
