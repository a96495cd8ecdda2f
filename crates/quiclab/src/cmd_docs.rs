//! `quiclab completions` and `quiclab man`: the command line described for a shell and for
//! `man`, made from the same definition as `--help` (clap_complete, clap_mangen), so they
//! cannot drift from it.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// Print a shell's completion script for quiclab to standard output.
///
/// e.g. `quiclab completions bash > /etc/bash_completion.d/quiclab`, or
/// `quiclab completions zsh > ~/.zfunc/_quiclab`.
#[derive(Args)]
pub struct CompletionsCmd {
    /// The shell: bash, elvish, fish, powershell or zsh.
    shell: clap_complete::Shell,
}

/// Write quiclab's manual pages (roff) into a directory: quiclab.1 and one page per command
/// (quiclab-run.1, quiclab-external-check-qlog.1, ...).
///
/// e.g. `quiclab man /usr/local/share/man/man1 && man quiclab-run`.
#[derive(Args)]
pub struct ManCmd {
    /// The directory (made if missing).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

pub fn completions(c: CompletionsCmd, mut cmd: clap::Command) -> anyhow::Result<i32> {
    use std::io::Write;
    let mut script = Vec::new();
    clap_complete::generate(c.shell, &mut cmd, "quiclab", &mut script);
    // a reader that stops early (`| head`) is no error of ours
    match std::io::stdout().lock().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(crate::usage::OK),
    }
}

pub fn man(c: ManCmd, cmd: clap::Command) -> anyhow::Result<i32> {
    quiclab_store::output::check_dir(&c.dir)?;
    std::fs::create_dir_all(&c.dir).with_context(|| format!("creating {}", c.dir.display()))?;
    let pages = pages(cmd)?;
    for (name, roff) in &pages {
        let page = c.dir.join(format!("{name}.1"));
        std::fs::write(&page, roff).with_context(|| format!("writing {}", page.display()))?;
    }
    eprintln!(
        "quiclab: {} manual pages in {}",
        pages.len(),
        c.dir.display()
    );
    Ok(crate::usage::OK)
}

/// A page for `cmd` and for every visible command under it, each named after its parents
/// (`quiclab-external-check-qlog`), in roff.
fn pages(cmd: clap::Command) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut todo = vec![(cmd.name("quiclab"), String::from("quiclab"))];
    while let Some((cmd, name)) = todo.pop() {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let sub_name = format!("{name}-{}", sub.get_name());
            todo.push((sub.clone().name(sub_name.clone()), sub_name));
        }
        let mut roff = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut roff)?;
        out.push((name, roff));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_visible_command_has_a_page_and_a_completion() {
        let pages = super::pages(crate::Cli::command()).unwrap();
        let names: Vec<&str> = pages.iter().map(|p| p.0.as_str()).collect();
        for want in [
            "quiclab",
            "quiclab-run",
            "quiclab-fingerprint",
            "quiclab-external-check-qlog",
            "quiclab-bench-trials",
        ] {
            assert!(names.contains(&want), "{want} not in {names:?}");
        }
        // the hidden commands (an endpoint's task, the reaper) have none
        assert!(
            !names
                .iter()
                .any(|n| n.contains("endpoint") || n.contains("reap"))
        );
        for (name, roff) in &pages {
            let text = String::from_utf8_lossy(roff);
            // a page names itself in its title, and says what the command does
            assert!(
                text.starts_with(".ie") || text.contains(".TH"),
                "{name}: {text}"
            );
            assert!(text.contains(&format!(".TH {name}")), "{name}: {text}");
            assert!(
                text.contains(".SH DESCRIPTION") || text.contains(".SH NAME"),
                "{name}"
            );
        }
        let run = &pages.iter().find(|p| p.0 == "quiclab-run").unwrap().1;
        assert!(
            String::from_utf8_lossy(run).contains("fail\\-after"),
            "its options"
        );
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut crate::Cli::command(),
            "quiclab",
            &mut bash,
        );
        let bash = String::from_utf8(bash).unwrap();
        for word in [
            "fingerprint",
            "check-qlog",
            "--fail-after",
            "--keep-cpus-awake",
        ] {
            assert!(bash.contains(word), "{word}");
        }
    }
}
