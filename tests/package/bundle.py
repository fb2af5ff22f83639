"""tests/package/bundle.sh's checks: python bundle.py REPO BUNDLE WORK_DIR."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema

repo, bundle, work = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])


def validator(name):
    schema = json.loads((repo / "packaging" / name).read_text())
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


# ---- the bundle's manifest -------------------------------------------------------------
with zipfile.ZipFile(bundle) as z:
    names = set(z.namelist())
    manifest = json.loads(z.read("manifest.json"))
    validator("mcpb-manifest.schema.json").validate(manifest)
    assert "server/mcp-memory" in names, names
    assert any(n.startswith("server/models/multilingual-e5-small/") for n in names)
    version = subprocess.check_output(["bash", str(repo / "scripts/version.sh")], text=True).strip()
    assert manifest["version"] == version
    tools = [t["name"] for t in manifest["tools"]]
    assert tools[:5] == ["recall", "remember", "list_memories", "forget", "memory_stats"], tools

    # Installed as a desktop client does: unpacked, executable bits as the archive says.
    installed = work / "installed"
    for info in z.infolist():
        z.extract(info, installed)
        mode = info.external_attr >> 16
        if mode:
            os.chmod(installed / info.filename, mode & 0o777)
print("bundle: the manifest is valid MCPB 0.4 and lists the binary's tools")

# ---- run as a client runs it: the manifest's command, its substitutions, over stdio -------
config = manifest["server"]["mcp_config"]
home = work / "home"
home.mkdir()


def substitute(value):
    return value.replace("${__dirname}", str(installed)).replace("${user_config.project}", "bundle-test")


env = {"PATH": os.environ["PATH"], "HOME": str(home), "XDG_DATA_HOME": str(home / "data")}
env.update({k: substitute(v) for k, v in config["env"].items()})
command = [substitute(config["command"])] + [substitute(a) for a in config["args"]]


def call(tool, arguments):
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bundle", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}},
    ]
    out = subprocess.run(command, input="".join(json.dumps(l) + "\n" for l in lines), capture_output=True,
                         text=True, env=env, timeout=120, check=True).stdout
    answer = next(json.loads(l) for l in out.splitlines() if l.strip() and json.loads(l).get("id") == 2)
    return answer["result"]["content"][0]["text"]


stored = call("remember", {"content": "배포 전에 항상 make check를 돌린다 (run make check before every deploy)"})
assert "Stored as" in stored, stored
found = call("recall", {"query": "what do we run before deploying?"})
assert "make check" in found, found
assert (home / "data" / "mcp-memory" / "memory.db").exists(), "memories are not in the user's data folder"
print("bundle: installed and run as a desktop client runs it, it remembers and recalls")

# ---- server.json --------------------------------------------------------------------------
url = f"https://github.com/OWNER/mcp-memory/releases/download/v{version}/mcp-memory-{version}-x86_64-unknown-linux-gnu.mcpb"
listing = json.loads(subprocess.check_output([
    sys.executable, str(repo / "scripts/packaging.py"), "server-json",
    "--name", "io.github.OWNER/mcp-memory", "--repository", "https://github.com/OWNER/mcp-memory",
    "--image", f"ghcr.io/owner/mcp-memory:{version}", "--bundle", f"{url}={bundle}"], text=True))
registry = validator("server.schema.json")
registry.validate(listing)
assert listing["$schema"] == registry.schema["$id"]
assert {p["registryType"] for p in listing["packages"]} == {"pypi", "oci", "mcpb"}
# The validator is the registry's: what the registry refuses, it refuses.
for broken in ({**listing, "description": "x" * 101}, {**listing, "name": "no-namespace"}):
    assert not registry.is_valid(broken)
print("bundle: server.json is valid against the registry's published schema")
