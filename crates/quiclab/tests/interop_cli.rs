//! The interop matrix: every HTTP/3 client stack fetches 1 MB from every HTTP/3 server stack
//! through the emulated link with 1 % loss, byte for byte (as the QUIC Interop Runner's transfer
//! test does). A failing pair is named with its reason. As root: trials need namespaces.

use quiclab_store::Store;

mod common;

/// The HTTP/3 stacks: quiclab's own (quinn) and the external ones that serve and fetch.
const STACKS: &[&str] = &["quinn", "ngtcp2", "quic-go", "quiche"];

#[test]
fn every_http3_client_fetches_1mb_byte_exact_from_every_http3_server_at_1_percent_loss() {
    common::assert_root();
    let mut arms = String::new();
    for server in STACKS {
        for client in STACKS {
            arms += &format!(
                "[arms.\"{client}-from-{server}\"]\nserver-stack = \"{server}\"\n\
                 client-stack = \"{client}\"\n"
            );
        }
    }
    let plan = format!(
        "name = \"interop\"\niterations = 1\nseed = 11\n[workload]\nkind = \"single-object\"\n\
         sizes = [\"1MB\"]\n[network]\nrate = \"20mbit\"\ndelay = \"10ms\"\nloss = \"1%\"\n{arms}"
    );
    let (_dir, out) = common::run_plan("interop", &plan, &[]);
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    assert_eq!(trials.len(), STACKS.len() * STACKS.len());
    let mut failures = Vec::new();
    for t in &trials {
        let rec = &t.requests[0];
        match &t.outcome {
            // the client's body was checked against the pattern: its count is whole
            Ok(m) if rec["bytes"] == 1_000_000 && rec["error"].is_null() => eprintln!(
                "{}: TTLB {:.1} ms, {} link drops",
                t.arm, m.ttlb_ms, m.link_drops
            ),
            Ok(_) => failures.push(format!("{}: {rec}", t.arm)),
            Err(e) => failures.push(format!("{}: {e}", t.arm)),
        }
    }
    assert!(
        failures.is_empty(),
        "pairs that failed:\n{}",
        failures.join("\n")
    );
}
