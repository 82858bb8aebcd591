"""``fdl config show`` rendering: YAML with aligned file:line provenance."""

from __future__ import annotations

import yaml

from fdl.tasks.layers import load_layers, merge
from fdl.tasks.show import as_json, render


def test_render_round_trips_and_tags_each_value(project):
    root = project(
        {
            "fdl.yml": """
            description: demo
            commands:
              test:
                run: |
                  pytest
                  echo done
                options: {layers: [1, 2, 3], fast: true}
              gone: {run: echo bye}
            long: [aaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbbbbb, ccccccccccccccccccccccc, ddddddddddddddddd]
            empty: {}
            """,
            "fdl.ci.yml": "commands:\n  gone: null\n  test:\n    options:\n      fast: false\n",
        }
    )
    merged = merge(load_layers(root / "fdl.yml", "ci"))
    text = render(merged)
    # strip the comments: what remains is YAML for exactly the merged data
    body = "\n".join(line.split("  # ")[0].rstrip() for line in text.splitlines())
    assert yaml.safe_load(body) == merged.data
    assert "gone" not in text  # deleted by the overlay
    lines = text.splitlines()
    assert next(x for x in lines if "fast:" in x).endswith("# fdl.ci.yml:5")
    assert next(x for x in lines if "layers:" in x).strip().startswith("layers: [1, 2, 3]")
    assert next(x for x in lines if x.startswith("long:")).endswith("# fdl.yml:9")  # block form
    assert "  - aaaaaaaaaaaaaaaaaaaa" in lines
    assert next(x for x in lines if "run: |" in x).endswith("# fdl.yml:4")
    assert as_json(merged)["sources"]["commands.test.options.fast"] == "fdl.ci.yml:5"


def test_empty_fdl_env_is_ignored(run_fdl, project):
    root = project({"fdl.yml": "commands:\n  hi: {run: echo hi}\n"})
    result = run_fdl("hi", cwd=root, env={"FDL_ENV": ""})
    assert result.returncode == 0 and result.stdout == "hi\n"
