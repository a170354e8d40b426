//! The parsers of what arrives from outside besides manifests: image configs and digests (from
//! registries), Go durations and listen addresses (flags), SSH templates and wrapper addresses
//! (the deployer's flags and Terraform output). Each must return a value or an error, never
//! panic. The first byte picks the parser; the rest is its input.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match which % 6 {
        0 => {
            let digest = runway_oci::Digest::of(rest);
            let _ = runway_oci::ImageConfig::parse(&digest, rest);
        }
        1 => {
            let _ = runway_oci::Digest::parse(&text);
        }
        2 => {
            let _ = runway_wrapper::duration::parse(&text);
        }
        3 => {
            let _ = text.parse::<runway_wrapper::ListenAddress>();
        }
        4 => {
            let vars = runway_ssh::TemplateVars {
                instance_name: "i-1".into(),
                instance_id: "1".into(),
                address: "127.0.0.1:22".into(),
                username: "root".into(),
                private_key_pem: String::new(),
                wrapper: runway_ssh::Destination::Unix("/run/w.sock".into()),
            };
            let _ = runway_ssh::expand(&text, &vars);
        }
        _ => {
            let _ = runway_ssh::Destination::parse(&text);
        }
    }
});
