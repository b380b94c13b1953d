//! The vault cipher: round trips, tampering, moved records, nonces, key files.

use std::collections::HashSet;

use quarry_domain::{AuthType, ServerId};

use super::*;

const CANARY: &[u8] = br#"{"key":"sk-canary-7f3a9c1e"}"#;

fn cipher() -> RingCipher {
    let key = VaultKey::generate().unwrap();
    RingCipher::new(KeySource::Text(key.to_text()), |_| {})
}

fn identity(server: &str) -> SealIdentity {
    SealIdentity {
        server_id: ServerId::parse(server).unwrap(),
        auth_type: AuthType::ApiKey,
    }
}

#[test]
fn a_sealed_record_opens_for_its_identity_only() {
    let c = cipher();
    let sealed = c.seal(&identity("srv-aaaa"), CANARY).unwrap();
    assert_eq!(
        c.open(&identity("srv-aaaa"), &sealed).unwrap().as_slice(),
        CANARY
    );
    assert!(!sealed.ciphertext.windows(CANARY.len()).any(|w| w == CANARY));
}

// traces: UC-7 — flipping any byte of a stored nonce, ciphertext or tag (of the credential or of
// its wrapped data key) is an integrity error, never plaintext or a panic; a record moved to
// another server or type fails to open.
#[test]
fn uc_7_any_altered_byte_or_moved_record_fails_its_integrity_check() {
    let c = cipher();
    let sealed = c.seal(&identity("srv-aaaa"), CANARY).unwrap();
    for field in 0..2 {
        let len = if field == 0 {
            sealed.ciphertext.len()
        } else {
            sealed.wrapped_key.len()
        };
        for i in 0..len {
            let mut altered = sealed.clone();
            let bytes = if field == 0 {
                &mut altered.ciphertext
            } else {
                &mut altered.wrapped_key
            };
            bytes[i] ^= 0x01;
            assert_eq!(
                c.open(&identity("srv-aaaa"), &altered),
                Err(CipherError::Integrity),
                "{field} {i}"
            );
        }
    }
    let mut truncated = sealed.clone();
    truncated.ciphertext.truncate(5);
    assert_eq!(
        c.open(&identity("srv-aaaa"), &truncated),
        Err(CipherError::Integrity)
    );
    assert_eq!(
        c.open(&identity("srv-bbbb"), &sealed),
        Err(CipherError::Integrity)
    );
    let as_bearer = SealIdentity {
        auth_type: AuthType::BearerToken,
        ..identity("srv-aaaa")
    };
    assert_eq!(c.open(&as_bearer, &sealed), Err(CipherError::Integrity));
    // The same record under another key is refused by its key id, and by its tag if relabelled.
    let other = cipher();
    assert!(matches!(
        other.open(&identity("srv-aaaa"), &sealed),
        Err(CipherError::UnknownKey(_))
    ));
    let relabelled = Sealed {
        key_id: other.load().unwrap(),
        ..sealed
    };
    assert_eq!(
        other.open(&identity("srv-aaaa"), &relabelled),
        Err(CipherError::Integrity)
    );
}

// traces: UC-8 — a million seals under one key repeat no nonce (each seal draws two: one for
// the credential, one for its wrapped data key).
#[test]
fn uc_8_a_million_encryptions_repeat_no_nonce() {
    let c = cipher();
    let id = identity("srv-aaaa");
    let mut nonces = HashSet::with_capacity(2_000_000);
    for _ in 0..1_000_000 / 2 {
        let sealed = c.seal(&id, b"x").unwrap();
        for bytes in [&sealed.ciphertext, &sealed.wrapped_key] {
            let nonce: [u8; NONCE_LEN] = bytes[..NONCE_LEN].try_into().unwrap();
            assert!(
                nonces.insert(nonce),
                "nonce repeated after {} seals",
                nonces.len()
            );
        }
    }
    assert_eq!(nonces.len(), 1_000_000);
}

#[test]
fn a_key_file_is_created_once_with_owner_only_access_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vault.key");
    let first = RingCipher::new(KeySource::CreatedOnFirstUse(path.clone()), |_| {});
    let id = first.load().unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let sealed = first.seal(&identity("srv-aaaa"), CANARY).unwrap();
    let again = RingCipher::new(KeySource::CreatedOnFirstUse(path.clone()), |_| {});
    assert_eq!(again.load().unwrap(), id);
    assert_eq!(
        again
            .open(&identity("srv-aaaa"), &sealed)
            .unwrap()
            .as_slice(),
        CANARY
    );
    let from_file = RingCipher::new(KeySource::File(path.clone()), |_| {});
    assert_eq!(from_file.load().unwrap(), id);
}

#[test]
fn a_bad_key_is_a_clear_refusal_that_holds_no_key_material() {
    let dir = tempfile::tempdir().unwrap();
    let missing = RingCipher::new(KeySource::File(dir.path().join("none.key")), |_| {});
    assert!(
        missing
            .load()
            .unwrap_err()
            .contains("cannot read the vault key file")
    );
    let short = RingCipher::new(KeySource::Text(Zeroizing::new("c2hvcnQ=".into())), |_| {});
    let e = short.load().unwrap_err();
    assert!(e.contains("32 bytes") && !e.contains("c2hvcnQ="), "{e}");
    let garbage = dir.path().join("garbage.key");
    std::fs::write(&garbage, "not base64!").unwrap();
    let e = RingCipher::new(KeySource::CreatedOnFirstUse(garbage.clone()), |_| {})
        .load()
        .unwrap_err();
    assert!(e.contains("garbage.key"), "{e}");
    assert_eq!(
        std::fs::read_to_string(&garbage).unwrap(),
        "not base64!",
        "never replaced"
    );
}

// traces: UC-8 — rotation: a new key seals and re-wraps while the old one still opens, a
// cipher loaded before the rotation (a gateway that keeps serving) opens re-wrapped records by
// reading the key file again, the credential's ciphertext never changes, and once the rotation
// is finished only the new key is kept.
#[test]
fn uc_8_rotation_rewraps_without_downtime_and_retires_the_old_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vault.key");
    let operator = RingCipher::new(KeySource::CreatedOnFirstUse(path.clone()), |_| {});
    let serving = RingCipher::new(KeySource::File(path.clone()), |_| {});
    let old_id = operator.load().unwrap();
    let sealed = operator.seal(&identity("srv-aaaa"), CANARY).unwrap();
    assert_eq!(serving.load().unwrap(), old_id);

    let new_id = operator.begin_rotation().unwrap();
    assert_ne!(new_id, old_id);
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
    assert_eq!(
        operator
            .open(&identity("srv-aaaa"), &sealed)
            .unwrap()
            .as_slice(),
        CANARY
    );
    let rewrapped = operator.rewrap(&identity("srv-aaaa"), &sealed).unwrap();
    assert_eq!(rewrapped.key_id, new_id);
    assert_eq!(rewrapped.ciphertext, sealed.ciphertext);
    assert_ne!(rewrapped.wrapped_key, sealed.wrapped_key);
    assert_eq!(
        serving
            .open(&identity("srv-aaaa"), &rewrapped)
            .unwrap()
            .as_slice(),
        CANARY
    );

    operator.finish_rotation().unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    let fresh = RingCipher::new(KeySource::File(path.clone()), |_| {});
    assert_eq!(
        fresh
            .open(&identity("srv-aaaa"), &rewrapped)
            .unwrap()
            .as_slice(),
        CANARY
    );
    assert_eq!(
        fresh.open(&identity("srv-aaaa"), &sealed),
        Err(CipherError::UnknownKey(old_id))
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn keys_given_in_the_environment_open_with_any_and_seal_with_the_first() {
    let (new, old) = (VaultKey::generate().unwrap(), VaultKey::generate().unwrap());
    let before = RingCipher::new(KeySource::Text(old.to_text()), |_| {});
    let sealed = before.seal(&identity("srv-aaaa"), CANARY).unwrap();
    let both = Zeroizing::new(format!(
        "{},{}",
        new.to_text().as_str(),
        old.to_text().as_str()
    ));
    let after = RingCipher::new(KeySource::Text(both), |_| {});
    assert_eq!(after.begin_rotation().unwrap(), new.id());
    let rewrapped = after.rewrap(&identity("srv-aaaa"), &sealed).unwrap();
    assert_eq!(rewrapped.key_id, new.id());
    let only_new = RingCipher::new(KeySource::Text(new.to_text()), |_| {});
    assert_eq!(
        only_new
            .open(&identity("srv-aaaa"), &rewrapped)
            .unwrap()
            .as_slice(),
        CANARY
    );
}
