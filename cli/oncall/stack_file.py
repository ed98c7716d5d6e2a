"""Edit one value of a ``Pulumi.<stack>.yaml`` file, changing only that value's bytes.

A stack file is reviewed and committed by people, so an automated edit must show up in the diff as
exactly the one value it changed: comments, key order, quoting, indentation and line endings of
everything else stay byte-for-byte. A YAML round-trip dumper cannot promise that, so the value's
position is read from the parser's marks and the text is spliced there; the result is parsed again
and compared with the intended document before it is written.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrails.errors import InputError

ConfigValue = bool | int | str


@dataclass(frozen=True)
class ConfigEdit:
    path: Path
    key: str  # the dotted key, e.g. ``parkbrake:parked`` or ``parkbrake:inference.live_colour``
    before: Any  # the value before the edit; None when the key was absent
    after: ConfigValue
    changed: bool


def config_key_path(dotted_key: str) -> list[str]:
    """``parkbrake:inference.live_colour`` → ``["config", "parkbrake:inference", "live_colour"]``."""
    parts = dotted_key.split(".")
    if not all(parts):
        raise InputError(f"{dotted_key!r} is not a config key such as parkbrake:parked")
    return ["config", *parts]


def read_config_value(path: Path, dotted_key: str) -> Any:
    """The value at ``dotted_key`` under ``config:``, or None when absent."""
    document: Any = _safe_load(_read_text(path), path)
    for key in config_key_path(dotted_key):
        if not isinstance(document, dict) or key not in document:
            return None
        document = document[key]
    return document


def config_region(stack: str, project_dir: Path) -> str | None:
    """The stack's ``aws:region``, read without validating the rest (an emergency must not wait on a typo)."""
    return config_text(stack, "aws:region", project_dir)


def config_text(stack: str, dotted_key: str, project_dir: Path) -> str | None:
    """A text value of ``Pulumi.<stack>.yaml`` in ``project_dir``; None when the file or key is absent or
    the file cannot be read (what reads it must not wait on a typo elsewhere in the file)."""
    # Imported here: choosing a region (every status and reap) must not load the stack model.
    from stacks.config import stack_file

    path = stack_file(stack, project_dir)
    try:
        value = read_config_value(path, dotted_key) if path.is_file() else None
    except InputError:
        return None
    return value if isinstance(value, str) else None


def set_config_value(path: Path, dotted_key: str, value: ConfigValue, *, write: bool = True) -> ConfigEdit:
    """Set ``dotted_key`` to ``value`` in the stack file at ``path``; idempotent.

    An absent key is added as the first entry of its mapping, on the line right after the parent's
    key (for a top-level key, right after ``config:``). With ``write=False`` nothing is written and
    the returned edit says what would change.
    """
    text = _read_text(path)
    keys = config_key_path(dotted_key)
    before = read_config_value(path, dotted_key)
    if before is not None and before == value and type(before) is type(value):
        return ConfigEdit(path, dotted_key, before, value, changed=False)
    edited = _splice(text, keys, value, path)
    _check_only_value_changed(text, edited, keys, value, path)
    if write:
        _write_atomically(path, edited)
    return ConfigEdit(path, dotted_key, before, value, changed=True)


def _read_text(path: Path) -> str:
    if not path.is_file():
        if path.name.startswith("Pulumi.") and path.name.endswith(".yaml"):  # a stack's file: name the others
            from stacks.config import missing_stack_file

            raise missing_stack_file(path.name.removeprefix("Pulumi.").removesuffix(".yaml"), path)
        raise InputError(f"{path} does not exist")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{path} is not UTF-8 text (byte {error.start}); save it as UTF-8") from None


def _safe_load(text: str, path: Path) -> Any:
    from ruamel.yaml import YAML, YAMLError

    try:
        return YAML(typ="safe").load(text)
    except YAMLError as error:
        raise InputError(f"{path.name} is not valid YAML: {error}") from None


def _splice(text: str, keys: list[str], value: ConfigValue, path: Path) -> str:
    from ruamel.yaml import YAML, YAMLError
    from ruamel.yaml.nodes import MappingNode, ScalarNode

    try:
        node = YAML().compose(text)
    except YAMLError as error:
        raise InputError(f"{path.name} is not valid YAML: {error}") from None
    parent_key: ScalarNode | None = None
    for depth, key in enumerate(keys):
        where = ".".join(keys[: depth + 1])
        if not isinstance(node, MappingNode):
            raise InputError(f"{path.name}: {'.'.join(keys[:depth]) or 'the document'} is not a mapping")
        # The safe load before this refused duplicate keys, so there is at most one entry.
        entries = [(key_node, value_node) for key_node, value_node in node.value if key_node.value == key]
        if not entries:
            if depth != len(keys) - 1:
                raise InputError(f"{path.name} has no {where}; add it before setting {'.'.join(keys[1:])}")
            return _insert_first_entry(text, node, parent_key, key=key, value=value, path=path)
        parent_key, node = entries[0]
    if not isinstance(node, ScalarNode) or node.style in ("|", ">"):
        raise InputError(f"{path.name}: {'.'.join(keys)} is not a single-line value")
    start, end = node.start_mark.index, node.end_mark.index
    return text[:start] + _render(value, text[start:end], node.style) + text[end:]


def _insert_first_entry(
    text: str, mapping: Any, parent_key: Any, *, key: str, value: ConfigValue, path: Path
) -> str:
    if parent_key is None or mapping.flow_style or not mapping.value:
        raise InputError(
            f"{path.name}: cannot add {key} to an empty or inline mapping; write it as an indented block"
        )
    column = mapping.value[0][0].start_mark.column
    line_end = text.find("\n", parent_key.end_mark.index)
    if line_end == -1:
        raise InputError(f"{path.name}: cannot add {key} after the last line")
    newline = "\r\n" if text[line_end - 1 : line_end] == "\r" else "\n"
    line = f"{' ' * column}{_plain_key(key)}: {_render(value, '', None)}{newline}"
    return text[: line_end + 1] + line + text[line_end + 1 :]


def _plain_key(key: str) -> str:
    return key if _reads_back_as(key, key) else _double_quoted(key)


def _render(value: ConfigValue, original: str, style: str | None) -> str:
    """The YAML text of ``value``, in the original's style where it had one (quotes, ``True``/``TRUE``).

    A boolean is always written plain: quoted, it would be the string "true", which the config refuses.
    """
    if isinstance(value, bool):
        word = "true" if value else "false"
        if style is None and original[:1].isupper():
            word = word.upper() if original.isupper() and len(original) > 1 else word.capitalize()
        return word
    text = str(value)
    if isinstance(value, int) and style is None:
        return text
    if style == "'":
        return "'" + text.replace("'", "''") + "'"
    if style == '"' or not _reads_back_as(text, value):
        return _double_quoted(text)
    return text


def _double_quoted(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid YAML double-quoted scalar


def _reads_back_as(text: str, value: object) -> bool:
    """True when plain ``text`` is read as ``value`` by YAML 1.2 and 1.1 readers alike (``yes`` is not)."""
    from ruamel.yaml import YAML, YAMLError

    for version in ((1, 2), (1, 1)):
        reader = YAML(typ="safe")
        reader.version = version
        try:
            loaded = reader.load(f"k: {text}\n")
        except YAMLError:
            return False
        if (
            not isinstance(loaded, dict)
            or loaded.get("k") != value
            or type(loaded.get("k")) is not type(value)
        ):
            return False
    return True


def _check_only_value_changed(
    original: str, edited: str, keys: list[str], value: ConfigValue, path: Path
) -> None:
    """The edited document must equal the original with just this one value set; anything else is a bug."""
    expected = _safe_load(original, path)
    mapping = expected
    for key in keys[:-1]:
        mapping = mapping[key]
    mapping[keys[-1]] = value
    if _safe_load(edited, path) != expected:
        raise RuntimeError(
            f"editing {'.'.join(keys)} in {path} would change more than that value; nothing written"
        )


def _write_atomically(path: Path, text: str) -> None:
    """Write beside the file and rename over it, so a crash never leaves half a stack file.

    A stack file that is a symbolic link (into a shared config repository, say) is edited where the
    link points: the rename lands on the target, in the target's directory, and the link stays a
    link. The file keeps its permission bits. A file with other hard links is written in place
    instead (:func:`_write_in_place`): a rename would give this name a new file and leave the other
    names with the old text, silently.
    """
    path = path.resolve(strict=True) if path.is_symlink() else path
    status = path.stat()
    temporary = _complete_copy_beside(path, text.encode("utf-8"), status.st_mode & 0o7777)
    try:
        if status.st_nlink > 1:
            _write_in_place(path, text.encode("utf-8"), temporary)
            Path(temporary).unlink()
        else:
            os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _complete_copy_beside(path: Path, data: bytes, mode: int) -> str:
    """The new text, whole and on disk, in a temporary file in ``path``'s directory."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return temporary


def _write_in_place(path: Path, data: bytes, copy: str) -> None:
    """Overwrite the file's own bytes (same inode, so every hard link sees the edit), then cut it to
    the new length and flush it to disk. A stack file is a few KiB: one ``write`` of it; should it
    fail part way, the complete new text is kept in ``copy`` and the error names it."""
    try:
        with path.open("r+b") as handle:
            handle.write(data)
            handle.truncate(len(data))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        kept = Path(copy).with_name(f"{path.name}.parkbrake-edit")
        os.replace(copy, kept)
        raise InputError(
            f"{path} has {path.stat().st_nlink} hard links and could not be rewritten in place "
            f"({error.strerror}); the edited text is in {kept}: copy it over {path.name}"
        ) from None
