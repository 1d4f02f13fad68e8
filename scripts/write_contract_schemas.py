"""Regenerate the session contract's JSON Schemas in schemas/ from tht.workflow.contract."""

import json
from pathlib import Path

from tht.workflow.contract import json_schemas

ROOT = Path(__file__).resolve().parents[1] / "schemas"

for name, schema in json_schemas().items():
    (ROOT / name).write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
    print(ROOT / name)
