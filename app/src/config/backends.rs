//! Which adapters hold the shared state: the store (`[store] backend`: the embedded SQLite
//! file, or PostgreSQL) and the cache (`[cache] backend`: this process's memory, or Redis).
//! Several replicas share one truth with `postgres` and `redis`.

use std::path::PathBuf;

use super::{VaultKey, file::File};

/// Where the store is.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreBackend {
    /// One SQLite file (`store.path`), or memory.
    Sqlite,
    /// PostgreSQL at `url`, in `schema`, with at most `max_connections` per replica.
    Postgres {
        /// `store.url` (`QUARRY_STORE_URL`).
        url: String,
        /// `store.schema`.
        schema: String,
        /// `store.max_connections`.
        max_connections: u32,
    },
}

/// Where the cache is.
#[derive(Clone, PartialEq, Eq)]
pub enum CacheBackend {
    /// This process's memory.
    Memory,
    /// Redis at `url`, every key under `prefix`.
    Redis {
        /// `cache.redis_url` (`QUARRY_CACHE_REDIS_URL`).
        url: String,
        /// `cache.redis_prefix`.
        prefix: String,
    },
}

/// A URL with its password hidden, for `Debug` (settings are logged).
fn hidden(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) if rest.contains('@') => {
            format!(
                "{scheme}://***@{}",
                rest.rsplit_once('@').map_or("", |(_, h)| h)
            )
        }
        _ => url.to_owned(),
    }
}

impl std::fmt::Debug for StoreBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite => f.write_str("Sqlite"),
            Self::Postgres {
                url,
                schema,
                max_connections,
            } => f
                .debug_struct("Postgres")
                .field("url", &hidden(url))
                .field("schema", schema)
                .field("max_connections", max_connections)
                .finish(),
        }
    }
}

impl std::fmt::Debug for CacheBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Redis { url, prefix } => f
                .debug_struct("Redis")
                .field("url", &hidden(url))
                .field("prefix", prefix)
                .finish(),
        }
    }
}

/// The store and the cache the configuration chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backends {
    /// The store.
    pub store: StoreBackend,
    /// The cache.
    pub cache: CacheBackend,
}

impl Default for Backends {
    fn default() -> Self {
        Self {
            store: StoreBackend::Sqlite,
            cache: CacheBackend::Memory,
        }
    }
}

impl Backends {
    /// The backends `file` names (after the environment's overrides), or what to fix.
    pub(super) fn of(file: &File) -> Result<Self, String> {
        let store = match file.store.backend.as_deref().unwrap_or("sqlite") {
            "sqlite" => StoreBackend::Sqlite,
            "postgres" => {
                let url = file.store.url.clone().ok_or(
                    "store.backend = \"postgres\" needs store.url (or QUARRY_STORE_URL): postgres://user@host:5432/database",
                )?;
                if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
                    return Err(format!(
                        "store.url {} is not a postgres:// URL",
                        hidden(&url)
                    ));
                }
                let schema = file.store.schema.clone().unwrap_or_else(|| "quarry".into());
                let mut chars = schema.chars();
                let valid = matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
                    && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                    && schema.len() <= 63;
                if !valid {
                    return Err(format!(
                        "store.schema {schema:?}: lowercase letters, digits and _, not starting with a digit"
                    ));
                }
                let max_connections = file.store.max_connections.unwrap_or(16);
                if !(1..=1000).contains(&max_connections) {
                    return Err("store.max_connections must be between 1 and 1000".into());
                }
                StoreBackend::Postgres {
                    url,
                    schema,
                    max_connections,
                }
            }
            other => {
                return Err(format!(
                    "store.backend is {other:?}; it is \"sqlite\" (one file, the default) or \"postgres\""
                ));
            }
        };
        if store == StoreBackend::Sqlite
            && (file.store.url.is_some() || file.store.schema.is_some())
        {
            return Err("store.url and store.schema are for store.backend = \"postgres\"".into());
        }
        let cache = match file.cache.backend.as_deref().unwrap_or("memory") {
            "memory" => CacheBackend::Memory,
            "redis" => {
                let url = file.cache.redis_url.clone().ok_or(
                    "cache.backend = \"redis\" needs cache.redis_url (or QUARRY_CACHE_REDIS_URL): redis://host:6379",
                )?;
                if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                    return Err(format!(
                        "cache.redis_url {} is not a redis:// URL",
                        hidden(&url)
                    ));
                }
                CacheBackend::Redis {
                    url,
                    prefix: file
                        .cache
                        .redis_prefix
                        .clone()
                        .unwrap_or_else(|| "quarry:".into()),
                }
            }
            other => {
                return Err(format!(
                    "cache.backend is {other:?}; it is \"memory\" (this process, the default) or \"redis\""
                ));
            }
        };
        if cache == CacheBackend::Memory
            && (file.cache.redis_url.is_some() || file.cache.redis_prefix.is_some())
        {
            return Err(
                "cache.redis_url and cache.redis_prefix are for cache.backend = \"redis\"".into(),
            );
        }
        Ok(Self { store, cache })
    }

    /// Replicas on one PostgreSQL must open one another's credentials: the vault key is given,
    /// never made by each replica for itself. Checked where the vault is opened (what never
    /// opens it, `quarry audit verify` say, needs no key).
    ///
    /// # Errors
    /// Says which key to set.
    pub(crate) fn check_vault_key(&self, key: &VaultKey) -> Result<(), String> {
        match (&self.store, key) {
            (StoreBackend::Postgres { .. }, VaultKey::CreatedOnFirstUse(_) | VaultKey::Ephemeral) => {
                Err("store.backend = \"postgres\" needs the vault key every replica shares: set QUARRY_VAULT_KEY or security.vault_key_file (32 random bytes in base64: head -c 32 /dev/urandom | base64)".into())
            }
            _ => Ok(()),
        }
    }

    /// The store file, which PostgreSQL does not have.
    pub(super) fn store_path(&self, path: Option<PathBuf>) -> Option<PathBuf> {
        match self.store {
            StoreBackend::Sqlite => path,
            StoreBackend::Postgres { .. } => None,
        }
    }
}

/// Where the store goes when the configuration does not say: `$XDG_DATA_HOME/quarry/quarry.db`,
/// else `~/.local/share/quarry/quarry.db`, else `./quarry.db`.
pub(super) fn default_store_path(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    let data = env("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local/share"))
        });
    match data {
        Some(dir) => dir.join("quarry").join("quarry.db"),
        None => PathBuf::from("quarry.db"),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::config::Settings;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Settings, String> {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        Settings::load(Some(f.path()), &|var| {
            env.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone())
        })
        .map_err(|e| e.message().to_owned())
    }

    const KEY: (&str, &str) = (
        "QUARRY_VAULT_KEY",
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
    );

    #[test]
    fn the_embedded_backends_are_the_default() {
        assert_eq!(load("", &[]).unwrap().backends, Backends::default());
    }

    #[test]
    fn postgres_and_redis_are_chosen_by_the_file_or_the_environment() {
        let file = "[store]\nbackend = \"postgres\"\nurl = \"postgres://q:pw@db/q\"\n\n[cache]\nbackend = \"redis\"\nredis_url = \"redis://cache:6379\"\n";
        let s = load(file, &[KEY]).unwrap();
        assert_eq!(
            s.backends.store,
            StoreBackend::Postgres {
                url: "postgres://q:pw@db/q".into(),
                schema: "quarry".into(),
                max_connections: 16,
            }
        );
        assert_eq!(
            s.backends.cache,
            CacheBackend::Redis {
                url: "redis://cache:6379".into(),
                prefix: "quarry:".into(),
            }
        );
        assert_eq!(s.store_path, None, "no file with PostgreSQL");
        assert!(
            !format!("{s:?}").contains(":pw@"),
            "the password is not shown"
        );
        let by_env = load(
            "",
            &[
                KEY,
                ("QUARRY_STORE_BACKEND", "postgres"),
                ("QUARRY_STORE_URL", "postgres://db/q"),
                ("QUARRY_CACHE_BACKEND", "redis"),
                ("QUARRY_CACHE_REDIS_URL", "redis://cache"),
            ],
        )
        .unwrap();
        assert!(matches!(
            by_env.backends.store,
            StoreBackend::Postgres { .. }
        ));
        assert!(matches!(by_env.backends.cache, CacheBackend::Redis { .. }));
    }

    #[test]
    fn what_is_wrong_is_said_with_the_key_to_fix() {
        for (text, env, says) in [
            (
                "[store]\nbackend = \"mysql\"\n",
                &[KEY][..],
                "store.backend is \"mysql\"",
            ),
            (
                "[store]\nbackend = \"postgres\"\n",
                &[KEY],
                "needs store.url",
            ),
            (
                "[store]\nbackend = \"postgres\"\nurl = \"mysql://x\"\n",
                &[KEY],
                "not a postgres:// URL",
            ),
            (
                "[store]\nbackend = \"postgres\"\nurl = \"postgres://x\"\nschema = \"a;b\"\n",
                &[KEY],
                "store.schema",
            ),
            (
                "[store]\nurl = \"postgres://x\"\n",
                &[KEY],
                "are for store.backend = \"postgres\"",
            ),
            (
                "[cache]\nbackend = \"memcached\"\n",
                &[KEY],
                "cache.backend is \"memcached\"",
            ),
            (
                "[cache]\nbackend = \"redis\"\n",
                &[KEY],
                "needs cache.redis_url",
            ),
            (
                "[cache]\nredis_url = \"redis://x\"\n",
                &[KEY],
                "are for cache.backend = \"redis\"",
            ),
        ] {
            let err = load(text, env).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
            assert!(!err.contains("secret"), "{err}");
        }
        // Loading needs no vault key (audit verification never opens the vault); opening the
        // vault on PostgreSQL does.
        let settings = load(
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://u:secret@x\"\n",
            &[],
        )
        .unwrap();
        let err = settings
            .backends
            .check_vault_key(&settings.vault_key)
            .unwrap_err();
        assert!(
            err.contains("needs the vault key every replica shares"),
            "{err}"
        );
        assert!(!err.contains("secret"), "{err}");
    }
}
