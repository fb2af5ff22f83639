#!/usr/bin/env python3
"""The desktop bundle and the MCP Registry's listing (docs/guide.md#listed-in-the-mcp-registry).

  scripts/packaging.py bundle BIN MODEL_DIR OUT.mcpb --platform darwin|linux
      An MCP Bundle (.mcpb: a zip with manifest.json at its root): the binary, the e5 model
      beside it, and a manifest whose tools are the ones the binary lists. A desktop client
      installs it with a click and asks for the one setting, the project (MEMORY_TENANT).

  scripts/packaging.py server-json --name NAME --repository URL --image REF --bundle URL=FILE ...
      server.json for the MCP Registry on stdout: the PyPI wheel, the OCI image and each
      bundle with its SHA-256. The version is Cargo.toml's.

Only the standard library: the release workflow runs it on every runner.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
DESCRIPTION = "Project memory for agents: remember decisions and conventions, recall them ranked by meaning"
MODEL = "multilingual-e5-small"


def version():
    return subprocess.check_output(["bash", str(REPO / "scripts/version.sh")], text=True).strip()


def tools_of(binary, model):
    """The tools the binary lists over stdio, as the manifest names them."""
    with tempfile.TemporaryDirectory() as home:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "MEMORY_TENANT": "bundle",
            "DATABASE_URL": f"sqlite:{home}/memory.db",
            "EMBEDDING_PROVIDER": "local",
            "EMBEDDING_MODEL": str(model),
        }
        lines = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "packaging", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ]
        sent = "".join(json.dumps(line) + "\n" for line in lines)
        out = subprocess.run([binary, "stdio"], input=sent, capture_output=True, text=True,
                             env=env, timeout=120, check=True).stdout
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    listed = next(a for a in answers if a.get("id") == 2)["result"]["tools"]
    return [{"name": t["name"], "description": t["description"]} for t in listed]


def manifest(binary, model, platform):
    return {
        "manifest_version": "0.4",
        "name": "mcp-memory",
        "display_name": "mcp-memory",
        "version": version(),
        "description": DESCRIPTION,
        "long_description": (
            "Gives your agent a memory that outlives a conversation: it remembers decisions, "
            "conventions and commands that work, and recalls them by meaning and by words, in "
            "Korean and English alike, with a confidence level. Memories stay on this machine "
            "(SQLite in your data folder); the multilingual-e5-small model runs in the process."
        ),
        "author": {"name": "mcp-memory contributors"},
        "license": "Apache-2.0",
        "keywords": ["memory", "mcp", "agents", "recall", "korean"],
        "server": {
            "type": "binary",
            "entry_point": "server/mcp-memory",
            "mcp_config": {
                "command": "${__dirname}/server/mcp-memory",
                "args": ["stdio"],
                "env": {
                    "MEMORY_TENANT": "${user_config.project}",
                    "EMBEDDING_PROVIDER": "local",
                    "EMBEDDING_MODEL": "${__dirname}/server/models/" + MODEL,
                },
            },
        },
        "user_config": {
            "project": {
                "type": "string",
                "title": "Project",
                "description": "The project whose memories this client reads and writes "
                               "(letters, digits, '.', '_', '-'); clients of one project share them.",
                "required": True,
                "default": "default",
            },
        },
        "tools": tools_of(binary, model),
        "tools_generated": False,
        "compatibility": {"platforms": [platform]},
    }


def bundle(args):
    model = Path(args.model_dir)
    files = sorted(p for p in model.rglob("*") if p.is_file())
    if not files:
        sys.exit(f"packaging: no model in {model}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("manifest.json", json.dumps(manifest(args.binary, model, args.platform), indent=2) + "\n")
        # The binary keeps its executable bit (zip's external attributes, as mcpb pack does).
        info = zipfile.ZipInfo("server/mcp-memory")
        info.external_attr = 0o100755 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, Path(args.binary).read_bytes())
        for f in files:
            z.write(f, f"server/models/{MODEL}/{f.relative_to(model)}")
    print(f"packaging: {out} ({out.stat().st_size // (1 << 20)} MiB), sha256 {sha256(out)}", file=sys.stderr)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def server_json(args):
    v = version()
    packages = [
        {
            "registryType": "pypi",
            "registryBaseUrl": "https://pypi.org",
            "identifier": "mcp-memory-rs",
            "version": v,
            # The wheel's command is `mcp-memory` (`uvx --from mcp-memory-rs mcp-memory stdio`).
            "runtimeHint": "uvx",
            "packageArguments": [{"type": "positional", "value": "stdio"}],
            "transport": {"type": "stdio"},
            "environmentVariables": [
                {"name": "MEMORY_TENANT", "isRequired": True,
                 "description": "The project whose memories this client reads and writes"},
                {"name": "DATABASE_URL", "format": "string",
                 "description": "Where memories live (default: SQLite in the user's data folder)"},
            ],
        },
        {
            "registryType": "oci",
            "identifier": args.image,
            "transport": {"type": "streamable-http", "url": "http://localhost:{PORT}/mcp"},
            "environmentVariables": [
                {"name": "PORT", "default": "3000", "description": "The port the server listens on"},
                {"name": "DATABASE_URL", "isRequired": True, "isSecret": True,
                 "description": "PostgreSQL with pgvector, e.g. postgres://user:pass@host/db"},
                {"name": "EMBEDDING_BASE_URL", "isRequired": True,
                 "description": "An OpenAI-compatible embeddings endpoint"},
                {"name": "EMBEDDING_API_KEY", "isSecret": True,
                 "description": "The endpoint's key"},
                {"name": "MCP_API_KEY", "isSecret": True,
                 "description": "The bearer key clients must send"},
            ],
        },
    ]
    for pair in args.bundle:
        url, _, path = pair.partition("=")
        packages.append({
            "registryType": "mcpb",
            "identifier": url,
            "version": v,
            "fileSha256": sha256(path),
            "transport": {"type": "stdio"},
        })
    listing = {
        "$schema": SCHEMA,
        "name": args.name,
        "title": "mcp-memory",
        "description": DESCRIPTION,
        "repository": {"url": args.repository, "source": "github"},
        "version": v,
        "packages": packages,
    }
    json.dump(listing, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    b = commands.add_parser("bundle")
    b.add_argument("binary")
    b.add_argument("model_dir")
    b.add_argument("out")
    b.add_argument("--platform", choices=["darwin", "linux", "win32"], required=True)
    s = commands.add_parser("server-json")
    s.add_argument("--name", required=True, help="io.github.OWNER/REPO")
    s.add_argument("--repository", required=True)
    s.add_argument("--image", required=True, help="the slim image with its tag")
    s.add_argument("--bundle", action="append", default=[], help="URL=FILE of a .mcpb")
    args = parser.parse_args()
    {"bundle": bundle, "server-json": server_json}[args.command](args)


if __name__ == "__main__":
    main()
