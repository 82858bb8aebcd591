"""Validate the frontmatter of the files assistants load, against their published rules.

- Agent Skills ``SKILL.md`` (agentskills.io, Claude Code): ``name`` 1–64 chars of ``a-z``, ``0-9``
  and single ``-`` (not first or last), equal to the skill's directory name; ``description``
  non-empty, at most 1024 characters; optional ``license``, ``compatibility``, ``metadata`` (a
  map), ``allowed-tools`` (a string), plus Claude Code's ``argument-hint``,
  ``disable-model-invocation``, ``user-invocable``, ``model``.
- Cursor ``.mdc`` rules: exactly ``description`` (string), ``globs`` (empty, or comma-separated
  patterns without brackets) and ``alwaysApply`` (boolean). Cursor silently skips a rule whose
  frontmatter is malformed, so an install must never write one.
"""

from __future__ import annotations

import re
from typing import Any

NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SKILL_KEYS = {
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
    "argument-hint",
    "disable-model-invocation",
    "user-invocable",
    "model",
}
MDC_KEYS = {"description", "globs", "alwaysApply"}


def split_frontmatter(text: str) -> tuple[dict[str, Any] | None, str, list[str]]:
    """``(data, body, problems)``; data is None when there is no valid frontmatter block."""
    import yaml

    if not text.startswith("---\n"):
        return None, text, ["the file must start with a '---' frontmatter line"]
    end = text.find("\n---\n", 4)
    if end < 0:
        return None, text, ["the frontmatter has no closing '---' line"]
    try:
        data = yaml.safe_load(text[4:end]) or {}
    except yaml.YAMLError as err:
        return None, text, [f"the frontmatter is not valid YAML: {err}"]
    if not isinstance(data, dict):
        return None, text, ["the frontmatter must be a mapping"]
    return data, text[end + 5 :], []


def validate_skill_md(text: str, directory_name: str) -> list[str]:
    data, body, problems = split_frontmatter(text)
    if data is None:
        return problems
    name = data.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 64 or not NAME.match(name):
        problems.append(
            "name must be 1-64 characters of a-z, 0-9 and single '-' (not first or last)"
        )
    elif name != directory_name:
        problems.append(f"name '{name}' must equal the skill directory name '{directory_name}'")
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append("description is required")
    elif len(description) > 1024:
        problems.append(f"description must be at most 1024 characters (has {len(description)})")
    unknown = sorted(set(data) - SKILL_KEYS)
    if unknown:
        problems.append(f"unknown frontmatter keys: {', '.join(unknown)}")
    if "metadata" in data and not isinstance(data["metadata"], dict):
        problems.append("metadata must be a mapping")
    if "allowed-tools" in data and not isinstance(data["allowed-tools"], str):
        problems.append("allowed-tools must be a string")
    if not body.strip():
        problems.append("the body (instructions) is empty")
    return problems


def validate_mdc(text: str) -> list[str]:
    data, body, problems = split_frontmatter(text)
    if data is None:
        return problems
    unknown = sorted(set(data) - MDC_KEYS)
    if unknown:
        problems.append(f"unknown frontmatter keys: {', '.join(unknown)}")
    if not isinstance(data.get("description"), str) or not data["description"].strip():
        problems.append("description must be a non-empty string")
    globs = data.get("globs")
    if globs is not None and (not isinstance(globs, str) or re.search(r"[\[\]]", globs)):
        problems.append("globs must be comma-separated patterns without brackets")
    if not isinstance(data.get("alwaysApply"), bool):
        problems.append("alwaysApply must be true or false")
    if not body.strip():
        problems.append("the rule body is empty")
    return problems
