//! Which file each key of the merged configuration came from, so that an error found after
//! merging (an unknown key, a wrong type, an invalid value) still names the right file.

use std::collections::BTreeMap;

/// Dotted key (in `serde_path_to_error`'s format: `a.b`, `policies[0].mode`) → file label.
#[derive(Debug, Clone, Default)]
pub struct Origins {
    files: BTreeMap<String, String>,
    fallback: String,
}

impl Origins {
    /// Every key comes from `file`.
    pub fn single(file: &str) -> Origins {
        Origins {
            files: BTreeMap::new(),
            fallback: file.to_owned(),
        }
    }

    /// The file that set `key`, or the nearest enclosing table or list that some file set.
    pub fn file_of(&self, key: &str) -> &str {
        let mut key = key;
        loop {
            if let Some(file) = self.files.get(key) {
                return file;
            }
            match key.rfind(['.', '[']) {
                Some(i) => key = &key[..i],
                None => return &self.fallback,
            }
        }
    }

    pub(crate) fn set_fallback(&mut self, file: &str) {
        file.clone_into(&mut self.fallback);
    }

    pub(crate) fn record(&mut self, key: &str, file: &str) {
        self.files.insert(key.to_owned(), file.to_owned());
    }

    pub(crate) fn record_if_absent(&mut self, key: &str, file: &str) {
        self.files
            .entry(key.to_owned())
            .or_insert_with(|| file.to_owned());
    }

    /// Forgets `key` and everything below it.
    pub(crate) fn forget(&mut self, key: &str) {
        let below = |k: &String| {
            k == key
                || k.strip_prefix(key)
                    .is_some_and(|rest| rest.starts_with(['.', '[']))
        };
        self.files.retain(|k, _| !below(k));
    }
}

/// `prefix.key`, or `key` at the top.
pub(crate) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}
