//! `submit`: write the batch script, run `sbatch --parsable`, parse the job id.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::spec::JobSandbox;
use super::{SlurmError, SlurmJobId, SlurmJobSpec, SlurmRunner, script};

impl SlurmRunner {
    /// Validates `spec`, writes its batch script and submits it; returns Slurm's job id.
    ///
    /// The script file is removed once `sbatch` returns (Slurm keeps its own copy). A
    /// supervised job's request stays in its output directory for the supervisor to read.
    pub fn submit(&self, spec: &SlurmJobSpec) -> Result<SlurmJobId, SlurmError> {
        spec.validate()?;
        let body: Vec<OsString> = match &spec.sandbox {
            JobSandbox::Supervised {
                sandbox,
                supervisor,
            } => {
                crate::sandbox::validate(sandbox, &spec.command)
                    .map_err(|source| SlurmError::InvalidSandbox { source })?;
                crate::sandbox::write_batch_request(&spec.output_dir, sandbox, &spec.command)
                    .map_err(|source| SlurmError::RequestWrite {
                        path: spec.output_dir.clone(),
                        source,
                    })?;
                supervisor.batch_argv(&spec.output_dir)
            }
            JobSandbox::UnsandboxedAmbient => spec.command.iter().map(OsString::from).collect(),
        };
        let script = script::batch_script(&body)?;
        let path = self.write_script(&script)?;
        let result = self.client.run("sbatch", &spec.sbatch_args(&path));
        // Best effort: a leftover script holds no secret and its name is never reused.
        let _ = fs::remove_file(&path);
        let output = result?;
        if !output.success {
            return Err(SlurmError::SbatchRejected {
                stderr: output.stderr,
            });
        }
        parse_sbatch_output(&output.stdout)
    }

    /// Writes the script to a fresh file in the script directory: `create_new` (`O_EXCL`)
    /// refuses any existing name, symlinks included; mode 0700.
    fn write_script(&self, script: &[u8]) -> Result<PathBuf, SlurmError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!(
            "hpcgate-{}-{nanos}-{}.sh",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = self.script_dir.join(name);
        let write = |path: &Path| -> std::io::Result<()> {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o700)
                .open(path)?;
            file.write_all(script)?;
            file.sync_all()
        };
        write(&path).map_err(|source| SlurmError::ScriptWrite {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }
}

/// Parses `sbatch --parsable` output: `id` or `id;cluster` (warnings may precede it).
pub fn parse_sbatch_output(stdout: &str) -> Result<SlurmJobId, SlurmError> {
    let line = stdout
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("");
    let (id, cluster) = match line.split_once(';') {
        Some((id, cluster)) => (id, Some(cluster)),
        None => (line, None),
    };
    let id: u64 = id.parse().map_err(|_| SlurmError::SbatchOutput {
        output: stdout.chars().take(200).collect(),
    })?;
    let cluster = cluster
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    Ok(SlurmJobId { id, cluster })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsable_output_forms() {
        assert_eq!(
            parse_sbatch_output("42\n").unwrap(),
            SlurmJobId {
                id: 42,
                cluster: None
            }
        );
        assert_eq!(
            parse_sbatch_output("43;hpc\n").unwrap(),
            SlurmJobId {
                id: 43,
                cluster: Some("hpc".into())
            }
        );
        assert_eq!(parse_sbatch_output("warning: x\n44\n").unwrap().id, 44);
        for bad in ["", "\n", "abc", "12abc", "-1", ";c"] {
            assert!(parse_sbatch_output(bad).is_err(), "{bad:?}");
        }
    }
}
