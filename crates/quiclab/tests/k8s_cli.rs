//! The Kubernetes deployment (`deploy/k8s`) validated offline by `quiclab-k8s-check`
//! (`deploy/k8s/check`, built by `.ci/setup`): strict decoding and Kubernetes' own create-time
//! defaulting and validation of every object, then the agreement quiclab needs between the shard
//! Job, the merge Job and the results volume. The manifests as shipped pass; each mistake a user
//! could make in them is refused with a line naming the object and the field. Fails (never
//! skips) when the checker is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/k8s")
}

fn checker() -> PathBuf {
    quiclab_external::def::locate_program("quiclab-k8s-check").unwrap_or_else(|| {
        panic!(
            "quiclab-k8s-check is not installed: build it with .ci/setup \
             (cd deploy/k8s/check && go build -o /usr/local/bin/quiclab-k8s-check .)"
        )
    })
}

/// Runs the checker on the kustomization in `dir` and its merge Job: exit code and output.
fn check(dir: &Path) -> (i32, String) {
    let out = Command::new(checker())
        .arg(dir)
        .arg(dir.join("merge-job.yaml"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn shipped_manifests_are_valid_and_agree() {
    let (code, out) = check(&deploy());
    assert_eq!(code, 0, "{out}");
    for object in [
        "PersistentVolumeClaim quiclab-results: valid",
        "Job quiclab-shards: valid",
        "Job quiclab-merge: valid",
        "3 objects valid, and they agree",
    ] {
        assert!(out.contains(object), "{object:?} missing from:\n{out}");
    }
}

#[test]
fn each_mistake_is_refused_naming_its_field() {
    // (file, text replaced, replacement, what the refusal must say)
    let mistakes = [
        // a misspelt field is not silently dropped
        (
            "shards-job.yaml",
            "completionMode: Indexed",
            "completionsMode: Indexed",
            r#"unknown field "spec.completionsMode""#,
        ),
        // Kubernetes' own validation
        (
            "shards-job.yaml",
            "parallelism: 4",
            "parallelism: -1",
            "spec.parallelism: Invalid value: -1",
        ),
        (
            "shards-job.yaml",
            "restartPolicy: Never",
            "restartPolicy: Always",
            "spec.template.spec.restartPolicy: Required value",
        ),
        (
            "pvc.yaml",
            "storage: 20Gi",
            "storage: twenty",
            "quantities must match the regular expression",
        ),
        // quiclab's agreements
        (
            "shards-job.yaml",
            "value: \"4\"",
            "value: \"3\"",
            "env QUICLAB_SHARDS is 3 but spec.completions is 4",
        ),
        (
            "merge-job.yaml",
            "value: \"4\"",
            "value: \"5\"",
            "env QUICLAB_SHARDS is 5 but the shards Job runs 4 shards",
        ),
        (
            "shards-job.yaml",
            "topologyKey: kubernetes.io/hostname",
            "topologyKey: topology.kubernetes.io/zone",
            "a required pod anti-affinity on topologyKey kubernetes.io/hostname",
        ),
        (
            "shards-job.yaml",
            "privileged: true",
            "privileged: false",
            "is not privileged and does not add capability SYS_ADMIN",
        ),
        (
            "pvc.yaml",
            r#"accessModes: ["ReadWriteMany"]"#,
            r#"accessModes: ["ReadWriteOnce"]"#,
            "ReadWriteMany is needed",
        ),
        (
            "merge-job.yaml",
            "claimName: quiclab-results",
            "claimName: results",
            r#"reads the claim "results" but the shards write to "quiclab-results""#,
        ),
        (
            "merge-job.yaml",
            "image: quiclab:latest",
            "image: quiclab:old",
            "differs from the shards'",
        ),
    ];
    let tmp = common::TempDir::new("k8s");
    for (i, (file, from, to, says)) in mistakes.iter().enumerate() {
        let dir = tmp.join(format!("case-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "kustomization.yaml",
            "pvc.yaml",
            "shards-job.yaml",
            "merge-job.yaml",
        ] {
            let text = std::fs::read_to_string(deploy().join(name)).unwrap();
            let text = if name == *file {
                assert!(text.contains(from), "{name} no longer has {from:?}");
                text.replacen(from, to, 1)
            } else {
                text
            };
            std::fs::write(dir.join(name), text).unwrap();
        }
        let (code, out) = check(&dir);
        assert_eq!(
            code, 1,
            "{file}: {from:?} -> {to:?} was not refused:\n{out}"
        );
        assert!(
            out.contains(says),
            "{file}: {from:?} -> {to:?}: the refusal does not say {says:?}:\n{out}"
        );
    }
}
