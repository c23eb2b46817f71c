//! The model providers a server offers, by name, and which one a conversation uses unless it
//! chose another (`@system model NAME`, `conversation/model.rs`). Built once at start by the
//! server (`roundtable::providers::ProviderSet`), shared by every conversation.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Provider;

/// The providers by name, and the default's name (always among them).
#[derive(Clone)]
pub struct Providers {
    /// The default's name.
    default: String,
    /// Every provider, by name.
    by_name: BTreeMap<String, Arc<dyn Provider>>,
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers")
            .field("default", &self.default)
            .field("names", &self.by_name.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Providers {
    /// `by_name`, with `default` (which must be among them) the default.
    pub fn new(default: &str, by_name: BTreeMap<String, Arc<dyn Provider>>) -> Providers {
        assert!(
            by_name.contains_key(default),
            "the default provider {default:?} is among the providers"
        );
        Providers {
            default: default.to_owned(),
            by_name,
        }
    }

    /// One provider, the default, named `name`.
    pub fn only(name: &str, provider: Arc<dyn Provider>) -> Providers {
        Providers::new(name, BTreeMap::from([(name.to_owned(), provider)]))
    }

    /// The default's name.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// The default provider.
    pub fn default_provider(&self) -> Arc<dyn Provider> {
        Arc::clone(&self.by_name[&self.default])
    }

    /// The provider named `name`, if the server offers it.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Provider>> {
        self.by_name.get(name).cloned()
    }

    /// Every provider's name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}
