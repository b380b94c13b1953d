//! `QUARRY_*` environment variables that override keys of the file.

use std::path::PathBuf;

use quarry_domain::Error;

use super::file::File;

/// `QUARRY_*` variables that override a file key.
pub const ENV_OVERRIDES: &[(&str, &str)] = &[
    ("QUARRY_CACHE_ENABLED", "cache.enabled"),
    ("QUARRY_CACHE_TTL_SECONDS", "cache.ttl_seconds"),
    ("QUARRY_CACHE_MAX_SIZE_MB", "cache.max_size_mb"),
    (
        "QUARRY_SECURITY_MAX_RESOURCE_SIZE_MB",
        "security.max_resource_size_mb",
    ),
    ("QUARRY_LOGGING_LEVEL", "logging.level"),
    ("QUARRY_STORE_PATH", "store.path"),
    ("QUARRY_STORE_BACKEND", "store.backend"),
    ("QUARRY_STORE_URL", "store.url"),
    ("QUARRY_CACHE_BACKEND", "cache.backend"),
    ("QUARRY_CACHE_REDIS_URL", "cache.redis_url"),
    ("QUARRY_VAULT_KEY_FILE", "security.vault_key_file"),
];

pub(super) fn apply_env(
    file: &mut File,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Error> {
    fn number(var: &str, v: &str) -> Result<u64, Error> {
        v.trim().parse().map_err(|_| {
            Error::invalid(format!(
                "environment variable {var}={v:?} is not a whole number"
            ))
        })
    }
    for (var, _) in ENV_OVERRIDES {
        let Some(value) = env(var) else { continue };
        match *var {
            "QUARRY_CACHE_ENABLED" => {
                file.cache.enabled = match value.trim() {
                    "true" | "1" | "yes" | "on" => true,
                    "false" | "0" | "no" | "off" => false,
                    other => {
                        return Err(Error::invalid(format!(
                            "environment variable {var}={other:?} is not true or false"
                        )));
                    }
                }
            }
            "QUARRY_CACHE_TTL_SECONDS" => file.cache.ttl_seconds = number(var, &value)?,
            "QUARRY_CACHE_MAX_SIZE_MB" => file.cache.max_size_mb = number(var, &value)?,
            "QUARRY_SECURITY_MAX_RESOURCE_SIZE_MB" => {
                file.security.max_resource_size_mb = number(var, &value)?;
            }
            "QUARRY_LOGGING_LEVEL" => file.logging.level = value,
            "QUARRY_STORE_PATH" => file.store.path = Some(PathBuf::from(value)),
            "QUARRY_STORE_BACKEND" => file.store.backend = Some(value),
            "QUARRY_STORE_URL" => file.store.url = Some(value),
            "QUARRY_CACHE_BACKEND" => file.cache.backend = Some(value),
            "QUARRY_CACHE_REDIS_URL" => file.cache.redis_url = Some(value),
            "QUARRY_VAULT_KEY_FILE" => file.security.vault_key_file = Some(PathBuf::from(value)),
            _ => {}
        }
    }
    Ok(())
}
