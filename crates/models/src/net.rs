//! The HTTP client of every download (`hf:` models, the known models' wheels): certificates
//! checked against the platform's roots (the system store and `SSL_CERT_FILE`), so a proxy
//! the system trusts is trusted here too.

use std::time::Duration;

use ureq::tls::{RootCerts, TlsConfig};

/// A blocking client that returns every HTTP status as an answer, with connect and response
/// timeouts.
pub(crate) fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .user_agent(concat!("wgllm/", env!("CARGO_PKG_VERSION")))
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .into()
}
