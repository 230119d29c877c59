"""Validates a JSON document against a JSON Schema (draft 2020-12) with the `jsonschema` package.

usage: validate_json.py SCHEMA -- COMMAND [ARGS...]   (validates COMMAND's standard output)
       validate_json.py SCHEMA FILE
"""
import json
import subprocess
import sys

import jsonschema


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    if argv[2] == "--":
        proc = subprocess.run(argv[3:], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"command failed with exit code {proc.returncode}:\n{proc.stderr}", file=sys.stderr)
            return 1
        text = proc.stdout
    else:
        with open(argv[2]) as f:
            text = f.read()
    doc = json.loads(text)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    for e in errors:
        print(f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}", file=sys.stderr)
    if errors:
        return 1
    print(f"valid against {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
