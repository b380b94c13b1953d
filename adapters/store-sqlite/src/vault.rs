//! The credential vault's rows: sealed records only, in the same SQLite file.

use async_trait::async_trait;
use quarry_domain::{AuthType, ServerId, ServerName};
use quarry_ports::{CredentialStore, SealIdentity, Sealed, StoreError, StoredCredential};
use sqlx::Row;

use crate::{SqliteStore, corrupt, failed, from_micros, micros};

fn credential_of(row: &sqlx::sqlite::SqliteRow) -> Result<StoredCredential, StoreError> {
    let text = |col: &str| -> Result<String, StoreError> { row.try_get(col).map_err(failed) };
    let bytes = |col: &str| -> Result<Vec<u8>, StoreError> { row.try_get(col).map_err(failed) };
    Ok(StoredCredential {
        server: ServerName::parse(&text("server")?).map_err(|e| corrupt(e.message()))?,
        identity: SealIdentity {
            server_id: ServerId::parse(&text("server_id")?).map_err(|e| corrupt(e.message()))?,
            auth_type: AuthType::from_stored(&text("auth_type")?)
                .ok_or_else(|| corrupt("a stored credential has an unknown type"))?,
        },
        sealed: Sealed {
            key_id: text("key_id")?,
            wrapped_key: bytes("wrapped_key")?,
            ciphertext: bytes("ciphertext")?,
        },
        updated_at: from_micros(row.try_get("updated_at").map_err(failed)?),
    })
}

#[async_trait]
impl CredentialStore for SqliteStore {
    async fn put(&self, credential: &StoredCredential) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "INSERT INTO credentials (server, server_id, auth_type, key_id, wrapped_key, ciphertext, updated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (server) DO UPDATE SET server_id = excluded.server_id,
                 auth_type = excluded.auth_type, key_id = excluded.key_id,
                 wrapped_key = excluded.wrapped_key, ciphertext = excluded.ciphertext,
                 updated_at = excluded.updated_at",
        )
        .bind(credential.server.as_str())
        .bind(credential.identity.server_id.as_str())
        .bind(credential.identity.auth_type.as_str())
        .bind(&credential.sealed.key_id)
        .bind(&credential.sealed.wrapped_key)
        .bind(&credential.sealed.ciphertext)
        .bind(micros(credential.updated_at))
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }

    async fn get(&self, server: &ServerName) -> Result<Option<StoredCredential>, StoreError> {
        let row = sqlx::query("SELECT * FROM credentials WHERE server = ?")
            .bind(server.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(failed)?;
        row.as_ref().map(credential_of).transpose()
    }

    async fn remove(&self, server: &ServerName) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let done = sqlx::query("DELETE FROM credentials WHERE server = ?")
            .bind(server.as_str())
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(done.rows_affected() > 0)
    }

    async fn all(&self) -> Result<Vec<StoredCredential>, StoreError> {
        let rows = sqlx::query("SELECT * FROM credentials ORDER BY server")
            .fetch_all(&self.pool)
            .await
            .map_err(failed)?;
        rows.iter().map(credential_of).collect()
    }

    async fn replace_sealed(
        &self,
        server: &ServerName,
        old: &Sealed,
        new: &Sealed,
    ) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let done = sqlx::query(
            "UPDATE credentials SET key_id = ?, wrapped_key = ?, ciphertext = ?
             WHERE server = ? AND key_id = ? AND wrapped_key = ? AND ciphertext = ?",
        )
        .bind(&new.key_id)
        .bind(&new.wrapped_key)
        .bind(&new.ciphertext)
        .bind(server.as_str())
        .bind(&old.key_id)
        .bind(&old.wrapped_key)
        .bind(&old.ciphertext)
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(done.rows_affected() > 0)
    }
}
