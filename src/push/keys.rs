//! The server's VAPID key (RFC 8292): given in the config, or kept in the data dir (made there
//! on the first start, mode 0600); and the token that signs each push with it.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::SecretKey;
use p256::elliptic_curve::rand_core::OsRng;
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use p256::pkcs8::EncodePrivateKey as _;
use reqwest::Url;
use serde::Serialize;

use crate::config::PushConfig;

/// The file in the data dir that holds the key when the config gives none.
pub const KEY_FILE: &str = "push-vapid.key";

/// How long a VAPID token is valid (RFC 8292 allows at most 24 hours).
const TOKEN_LIFE: Duration = Duration::from_secs(12 * 3600);

/// The server's key pair, ready to sign.
pub(crate) struct Vapid {
    key: EncodingKey,
    /// The public key as browsers take it (`applicationServerKey`): the uncompressed point,
    /// base64url.
    public: String,
    subject: String,
}

#[derive(Serialize)]
struct Claims<'a> {
    aud: &'a str,
    exp: u64,
    sub: &'a str,
}

impl Vapid {
    /// The key of `config`, else the one in `data_dir` (made when there is none).
    ///
    /// # Errors
    /// A key that is not a base64url P-256 scalar, a key file others may read, or one that
    /// can't be read or written.
    pub(crate) fn load(config: &PushConfig, data_dir: &Path) -> anyhow::Result<Self> {
        let secret = match &config.vapid_private_key {
            Some(text) => {
                decode(text).map_err(|e| anyhow::anyhow!("push.vapid_private_key: {e}"))?
            }
            None => from_file(&data_dir.join(KEY_FILE))?,
        };
        let public = B64.encode(secret.public_key().to_encoded_point(false).as_bytes());
        let der = secret
            .to_pkcs8_der()
            .map_err(|e| anyhow::anyhow!("cannot encode the VAPID key: {e}"))?;
        Ok(Vapid {
            key: EncodingKey::from_ec_der(der.as_bytes()),
            public,
            subject: config.subject.clone(),
        })
    }

    /// The public key, as `GET /api/push/key` gives it.
    pub(crate) fn public_key(&self) -> &str {
        &self.public
    }

    /// The `Authorization` header of a push to `endpoint`: a token for the endpoint's origin,
    /// and the public key.
    pub(crate) fn authorization(
        &self,
        endpoint: &Url,
    ) -> Result<String, jsonwebtoken::errors::Error> {
        let exp = (SystemTime::now() + TOKEN_LIFE)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let aud = endpoint.origin().ascii_serialization();
        let claims = Claims {
            aud: &aud,
            exp,
            sub: &self.subject,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &self.key)?;
        Ok(format!("vapid t={token}, k={}", self.public))
    }
}

/// A private scalar written as base64url (padding allowed).
fn decode(text: &str) -> Result<SecretKey, String> {
    let bytes = B64
        .decode(text.trim().trim_end_matches('='))
        .map_err(|_| "not base64url".to_owned())?;
    SecretKey::from_slice(&bytes).map_err(|_| "not a 32-byte P-256 private key".to_owned())
}

/// The key kept at `path`, made (mode 0600) when the file does not exist.
fn from_file(path: &Path) -> anyhow::Result<SecretKey> {
    let secret = SecretKey::random(&mut OsRng);
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match made {
        Ok(mut file) => {
            let text = B64.encode(secret.to_bytes());
            file.write_all(format!("{text}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            tracing::info!(file = %path.display(), "made the server's Web Push (VAPID) key");
            Ok(secret)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(path)?.permissions().mode();
            if mode & 0o077 != 0 {
                anyhow::bail!(
                    "{} may be read by others (mode {:o}): make it 0600",
                    path.display(),
                    mode & 0o777
                );
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            decode(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
        }
        Err(e) => Err(anyhow::anyhow!("cannot make {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(key: Option<&str>) -> PushConfig {
        PushConfig {
            vapid_private_key: key.map(str::to_owned),
            ..PushConfig::default()
        }
    }

    #[test]
    fn the_key_is_made_once_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = Vapid::load(&config(None), dir.path()).unwrap();
        let file = dir.path().join(KEY_FILE);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Vapid::load(&config(None), dir.path()).unwrap();
        assert_eq!(first.public_key(), again.public_key());
        assert_eq!(B64.decode(first.public_key()).unwrap().len(), 65);

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = Vapid::load(&config(None), dir.path()).err().unwrap();
        assert!(refused.to_string().contains("make it 0600"), "{refused}");
    }

    #[test]
    fn a_configured_key_wins_and_a_bad_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let secret = SecretKey::random(&mut OsRng);
        let text = B64.encode(secret.to_bytes());
        let vapid = Vapid::load(&config(Some(&text)), dir.path()).unwrap();
        let public = B64.encode(secret.public_key().to_encoded_point(false).as_bytes());
        assert_eq!(vapid.public_key(), public);
        assert!(!dir.path().join(KEY_FILE).exists());
        for bad in ["", "!!", "AAAA", &B64.encode([0u8; 32])] {
            assert!(
                Vapid::load(&config(Some(bad)), dir.path()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_token_names_the_endpoints_origin_with_its_port() {
        let dir = tempfile::tempdir().unwrap();
        let vapid = Vapid::load(&config(None), dir.path()).unwrap();
        let url = Url::parse("https://push.example:8443/send/abc").unwrap();
        let header = vapid.authorization(&url).unwrap();
        let (token, key) = header
            .strip_prefix("vapid t=")
            .unwrap()
            .split_once(", k=")
            .unwrap();
        assert_eq!(key, vapid.public_key());
        let point = B64.decode(key).unwrap();
        let decoding = jsonwebtoken::DecodingKey::from_ec_components(
            &B64.encode(&point[1..33]),
            &B64.encode(&point[33..]),
        )
        .unwrap();
        let mut validation = jsonwebtoken::Validation::new(Algorithm::ES256);
        validation.set_audience(&["https://push.example:8443"]);
        let claims = jsonwebtoken::decode::<serde_json::Value>(token, &decoding, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["sub"], "mailto:admin@agentmux.invalid");
    }
}
