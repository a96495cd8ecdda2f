//! The SPKI pin Chromium trusts a certificate by (`--ignore-certificate-errors-spki-list`):
//! base64 of the SHA-256 of the certificate's DER-encoded SubjectPublicKeyInfo.

use base64::Engine;

/// Why a certificate gave no pin.
#[derive(Debug, thiserror::Error)]
pub enum SpkiError {
    #[error("no PEM certificate in the file")]
    NoPem,
    #[error("the certificate's PEM is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("the certificate is not DER as X.509 lays it out ({0})")]
    Der(&'static str),
}

/// The pin of the first certificate in `pem`.
pub fn pin_from_pem(pem: &str) -> Result<String, SpkiError> {
    let body: String = pem
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)
        .and_then(|rest| rest.split("-----END CERTIFICATE-----").next())
        .ok_or(SpkiError::NoPem)?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD.decode(body)?;
    let spki = spki_of(&der)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, spki);
    Ok(base64::engine::general_purpose::STANDARD.encode(digest.as_ref()))
}

/// One DER element: (tag, the whole element, its contents, what follows it).
type Element<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

/// The DER element at the start of `b`.
fn element(b: &[u8]) -> Result<Element<'_>, SpkiError> {
    let (&tag, rest) = b.split_first().ok_or(SpkiError::Der("truncated"))?;
    let (&first, rest) = rest.split_first().ok_or(SpkiError::Der("truncated"))?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7F) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err(SpkiError::Der("bad length"));
        }
        let len = rest[..n].iter().fold(0usize, |a, &x| (a << 8) | x as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(SpkiError::Der("truncated"));
    }
    let header = b.len() - rest.len();
    Ok((tag, &b[..header + len], &rest[..len], &rest[len..]))
}

/// The SubjectPublicKeyInfo element of a DER certificate: Certificate is a SEQUENCE of
/// tbsCertificate (a SEQUENCE of [0] version (optional), serialNumber, signature, issuer,
/// validity, subject, subjectPublicKeyInfo, ...), signatureAlgorithm, signature.
fn spki_of(cert: &[u8]) -> Result<&[u8], SpkiError> {
    let (tag, _, body, _) = element(cert)?;
    if tag != 0x30 {
        return Err(SpkiError::Der("not a SEQUENCE"));
    }
    let (tag, _, mut tbs, _) = element(body)?;
    if tag != 0x30 {
        return Err(SpkiError::Der("tbsCertificate is not a SEQUENCE"));
    }
    // skip the optional version, then serial, signature, issuer, validity, subject
    if tbs.first() == Some(&0xA0) {
        tbs = element(tbs)?.3;
    }
    for _ in 0..5 {
        tbs = element(tbs)?.3;
    }
    let (tag, whole, _, _) = element(tbs)?;
    if tag != 0x30 {
        return Err(SpkiError::Der("subjectPublicKeyInfo is not a SEQUENCE"));
    }
    Ok(whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pin_is_the_digest_of_the_certificates_public_key() {
        // a certificate made by the lab's own TLS code (rcgen); its key pair's public key DER
        // is the SubjectPublicKeyInfo the pin must cover
        let id = quiclab_test_cert();
        let want = base64::engine::general_purpose::STANDARD
            .encode(ring::digest::digest(&ring::digest::SHA256, &id.1).as_ref());
        assert_eq!(pin_from_pem(&id.0).unwrap(), want);
        assert!(matches!(pin_from_pem("nothing"), Err(SpkiError::NoPem)));
        let broken = id.0.replacen("MII", "MIA", 1);
        assert!(pin_from_pem(&broken).is_err());
    }

    /// (certificate PEM, SubjectPublicKeyInfo DER) of a fresh self-signed certificate.
    fn quiclab_test_cert() -> (String, Vec<u8>) {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        (
            made.cert.pem(),
            rcgen::PublicKeyData::subject_public_key_info(&made.signing_key),
        )
    }
}
