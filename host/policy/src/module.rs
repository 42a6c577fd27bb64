//! Loading a policy: read the bytes (a file or `stock:<name>`), digest them, compile through
//! the cache, and validate that the component fits the `hpcgate:policy` world and imports
//! nothing else.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};

use super::bindings::{Policy, PolicyPre};
use super::cache::CompileCache;
use super::engine::PolicyEngine;
use super::instance::GuestState;
use super::stock;
use super::wasi;

/// The interfaces a policy may import: the contract's types and the log, of this contract
/// version (a component built against another version of `wit/` is refused with a rebuild hint).
const ALLOWED_IMPORTS: [&str; 2] = ["hpcgate:policy/types@0.2.", "hpcgate:policy/log@0.2."];

/// The contract version this host serves, for messages.
const CONTRACT: &str = "hpcgate:policy@0.2";

/// Where a policy module comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleSource {
    /// `stock:<name>`: a policy embedded in the binary.
    Stock(String),
    /// A `.wasm` component (or a core module built with wit-bindgen) on disk.
    Path(PathBuf),
}

impl FromStr for ModuleSource {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.strip_prefix("stock:") {
            Some(name) => ModuleSource::Stock(name.to_owned()),
            None => ModuleSource::Path(PathBuf::from(s)),
        })
    }
}

impl fmt::Display for ModuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleSource::Stock(name) => write!(f, "stock:{name}"),
            ModuleSource::Path(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Why a policy module could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read policy module `{path}`")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unknown stock policy `stock:{name}`; the stock policies are {known}")]
    UnknownStock { name: String, known: String },
    #[error(
        "`{0}` is a core module without a component type; build it with wit-bindgen for the \
         `hpcgate:policy` world, or wrap it with `wasm-tools component new`"
    )]
    Componentize(String),
    #[error("`{source_name}` is not a valid WebAssembly component: {detail}")]
    Invalid { source_name: String, detail: String },
    #[error(
        "`{source_name}` imports `{import}`, which hpcgate does not provide: a policy may import \
         the `hpcgate:policy` world and WASI's cli, io, clocks, random and filesystem (given no \
         files, network, time or entropy), nothing else; remove the use of `{import}`{hint}"
    )]
    ForeignImport {
        source_name: String,
        import: String,
        /// For a WASI import: how to build a JavaScript or Python policy without it.
        hint: &'static str,
    },
    #[error(
        "`{source_name}` was built against `{import}`, but this gateway serves {CONTRACT}: \
         rebuild the policy with the current `hpcgate-policy-sdk` (or `wit/policy.wit`)"
    )]
    OtherContract { source_name: String, import: String },
    #[error("`{source_name}` does not implement the `hpcgate:policy` world: {detail}")]
    WrongWorld { source_name: String, detail: String },
}

/// A compiled, validated policy component, ready to be instantiated.
#[derive(Clone)]
pub struct PolicyModule {
    pub(crate) inner: Arc<ModuleInner>,
}

pub(crate) struct ModuleInner {
    pub(crate) engine: PolicyEngine,
    pub(crate) source: ModuleSource,
    pub(crate) digest: String,
    pub(crate) pre: PolicyPre<GuestState>,
    /// Built for a WASI target: WASI is linked (see `wasi.rs`).
    pub(crate) imports_wasi: bool,
}

impl fmt::Debug for PolicyModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyModule")
            .field("source", &self.inner.source)
            .field("digest", &self.inner.digest)
            .finish()
    }
}

impl PolicyModule {
    /// `sha256:<hex>` of the module bytes as shipped.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// Whether the component is built for a WASI target (and WASI is linked for it).
    pub fn imports_wasi(&self) -> bool {
        self.inner.imports_wasi
    }

    pub fn source(&self) -> &ModuleSource {
        &self.inner.source
    }

    pub(crate) fn load(
        engine: &PolicyEngine,
        cache: Option<&CompileCache>,
        source: &ModuleSource,
    ) -> Result<Self, LoadError> {
        let bytes = read(source)?;
        let hex = hex::encode(Sha256::digest(&bytes));
        let source_name = source.to_string();
        let component = match cache.and_then(|c| c.get(&engine.engine, &hex)) {
            Some(component) => component,
            None => {
                // Refused imports are refused before the compilation they would waste.
                for name in top_level_imports(&bytes).unwrap_or_default() {
                    classify_import(&name, &source_name)?;
                }
                let component = compile(engine, &bytes, &source_name)?;
                if let Some(cache) = cache {
                    cache.put(&hex, &component);
                }
                component
            }
        };
        let imports_wasi = check_imports(engine, &component, &source_name)?;
        let pre = link(engine, &component, imports_wasi, &source_name)?;
        Ok(PolicyModule {
            inner: Arc::new(ModuleInner {
                engine: engine.clone(),
                source: source.clone(),
                digest: format!("sha256:{hex}"),
                pre,
                imports_wasi,
            }),
        })
    }

    /// The component this module was compiled from, read again from its source (and checked
    /// against the digest it was loaded with).
    pub(crate) fn component_bytes(&self) -> Result<Vec<u8>, String> {
        let bytes = read(&self.inner.source).map_err(|e| e.to_string())?;
        if format!("sha256:{}", hex::encode(Sha256::digest(&bytes))) != self.inner.digest {
            return Err(format!(
                "`{}` changed since it was loaded",
                self.inner.source
            ));
        }
        Ok(match bytes.starts_with(&CORE_MODULE) {
            true => hpcgate_policy_build::componentize(&bytes)?,
            false => bytes,
        })
    }

    /// This module (its source, digest and imports) with another compiled component of the
    /// same world: a configured snapshot of it.
    pub(crate) fn with_component(&self, component: &Component) -> Result<PolicyModule, String> {
        let inner = &self.inner;
        let pre = link(
            &inner.engine,
            component,
            inner.imports_wasi,
            &inner.source.to_string(),
        )
        .map_err(|e| e.to_string())?;
        Ok(PolicyModule {
            inner: Arc::new(ModuleInner {
                engine: inner.engine.clone(),
                source: inner.source.clone(),
                digest: inner.digest.clone(),
                pre,
                imports_wasi: inner.imports_wasi,
            }),
        })
    }
}

/// Links the `hpcgate:policy` world (and WASI when the component imports it) for `component`.
fn link(
    engine: &PolicyEngine,
    component: &Component,
    imports_wasi: bool,
    source_name: &str,
) -> Result<PolicyPre<GuestState>, LoadError> {
    let mut linker = Linker::<GuestState>::new(&engine.engine);
    Policy::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
        .and_then(|()| match imports_wasi {
            true => wasi::add_to_linker(&mut linker),
            false => Ok(()),
        })
        .map_err(|e| LoadError::Invalid {
            source_name: source_name.to_owned(),
            detail: format!("{e:#}"),
        })?;
    linker
        .instantiate_pre(component)
        .and_then(PolicyPre::new)
        .map_err(|e| LoadError::WrongWorld {
            source_name: source_name.to_owned(),
            detail: format!("{e:#}"),
        })
}

fn read(source: &ModuleSource) -> Result<Vec<u8>, LoadError> {
    match source {
        ModuleSource::Stock(name) => {
            stock::bytes(name)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| LoadError::UnknownStock {
                    name: name.clone(),
                    known: stock::names().join(", "),
                })
        }
        ModuleSource::Path(path) => std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.clone(),
            source,
        }),
    }
}

/// The first bytes of a core module (`\0asm` version 1), as opposed to a component.
const CORE_MODULE: [u8; 8] = [0, b'a', b's', b'm', 1, 0, 0, 0];

/// A core module (`\0asm` version 1) is wrapped into a component first; components and `.wat`
/// text go to wasmtime as they are.
fn compile(engine: &PolicyEngine, bytes: &[u8], source_name: &str) -> Result<Component, LoadError> {
    let owned;
    let bytes = if bytes.starts_with(&CORE_MODULE) {
        owned = hpcgate_policy_build::componentize(bytes)
            .map_err(|_| LoadError::Componentize(source_name.to_owned()))?;
        &owned[..]
    } else {
        bytes
    };
    Component::new(&engine.engine, bytes).map_err(|e| LoadError::Invalid {
        source_name: source_name.to_owned(),
        detail: format!("{e:#}"),
    })
}

/// Componentizers add WASI imports of their own (`wasi:sockets` from componentize-py,
/// `wasi:http` from jco's SpiderMonkey backend): their options that stub WASI out drop them.
const STUB_WASI_HINT: &str = "; a JavaScript or Python componentizer adds it: build with \
    `componentize-py componentize --stub-wasi` or `jco componentize --backend quickjs \
    --backend-qjs-disable-async --backend-qjs-stub-wasi` (as `hpcgate policy new --lang js|python` \
    projects do)";

/// Refuses imports outside the `hpcgate:policy` world and the WASI interfaces hpcgate links;
/// returns whether the component imports WASI.
fn check_imports(
    engine: &PolicyEngine,
    component: &Component,
    source_name: &str,
) -> Result<bool, LoadError> {
    let mut imports_wasi = false;
    for (name, _) in component.component_type().imports(&engine.engine) {
        imports_wasi |= classify_import(name, source_name)?;
    }
    Ok(imports_wasi)
}

/// Whether an import is one of the WASI interfaces hpcgate links (`true`) or of the policy
/// world (`false`); an error for anything else.
fn classify_import(name: &str, source_name: &str) -> Result<bool, LoadError> {
    if wasi::PROVIDED.iter().any(|p| name.starts_with(p)) {
        Ok(true)
    } else if ALLOWED_IMPORTS.iter().any(|p| name.starts_with(p)) {
        Ok(false)
    } else if name.starts_with("hpcgate:policy/") {
        Err(LoadError::OtherContract {
            source_name: source_name.to_owned(),
            import: name.to_owned(),
        })
    } else {
        Err(LoadError::ForeignImport {
            source_name: source_name.to_owned(),
            import: name.to_owned(),
            hint: if name.starts_with("wasi:") {
                STUB_WASI_HINT
            } else {
                ""
            },
        })
    }
}

/// The names a component imports at its top level, read without compiling it. `None` when the
/// bytes are not a component wasmparser reads (the compilation then says why); a core module
/// has none (it is checked once wrapped and compiled).
fn top_level_imports(bytes: &[u8]) -> Option<Vec<String>> {
    use wasmtime::wasmparser::{ComponentTypeRef, Parser, Payload};
    let mut depth = 0usize;
    let mut names = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            // Every module or component, nested ones too, starts with its version and ends.
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    let import = import.ok()?;
                    // A type import (`use types.{call}` in a world) names a type, not a
                    // capability; the compiled component's imports leave them out too.
                    if !matches!(import.ty, ComponentTypeRef::Type(_)) {
                        names.push(import.name.name.to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    Some(names)
}
