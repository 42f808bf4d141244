//! `trove clone SRC DST`: a writable copy of a file or a directory tree that shares every
//! chunk with its source (no byte copied; see the meta crate's `clone` module). A file is one
//! `CloneFile`; a tree is walked here, directories and symbolic links made again and each file
//! cloned, so a tree that changes during the clone may be copied partly before and partly
//! after a change: clone from `SRC/.snapshots/NAME/...` for a copy as of one moment.

use crate::cmds::ClusterOpt;
use anyhow::{anyhow, bail, Result};
use client::Client;
use wire::{Attr, FileKind, Ino};

#[derive(clap::Args)]
pub struct CloneArgs {
    /// The file or directory to clone (a path below `.snapshots/NAME/` clones it as the
    /// snapshot holds it).
    pub src: String,
    /// The new path; it must not exist yet.
    pub dst: String,
    #[command(flatten)]
    pub cluster: ClusterOpt,
}

/// What a clone made.
#[derive(Default)]
struct Made {
    files: u64,
    bytes: u64,
    dirs: u64,
    links: u64,
    skipped: Vec<String>,
}

pub async fn run(args: CloneArgs, client: &Client) -> Result<()> {
    let src = client.resolve(&args.src).await.map_err(|e| anyhow!("cannot clone {}: {e}", args.src))?;
    if client.resolve(&args.dst).await.is_ok() {
        bail!("cannot clone to {}: it exists", args.dst);
    }
    let (parent, name) = client.parent_of(&args.dst).await.map_err(|e| anyhow!("cannot clone to {}: {e}", args.dst))?;
    let mut made = Made::default();
    match src.kind {
        FileKind::File => {
            client
                .clone_file(src.ino, parent, name)
                .await
                .map_err(|e| anyhow!("cannot clone {} to {}: {e}", args.src, args.dst))?;
            made.files = 1;
            made.bytes = src.size;
        }
        FileKind::Dir => {
            let top = client
                .mkdir(parent, name, src.mode & 0o7777)
                .await
                .map_err(|e| anyhow!("cannot make {}: {e}", args.dst))?;
            made.dirs = 1;
            clone_tree(client, &src, &args.src, top.ino, &args.dst, &mut made).await?;
        }
        other => bail!("cannot clone {}: it is a {other:?}; only files and directories are cloned", args.src),
    }
    println!(
        "cloned {} to {}: {} file{} ({} bytes, none copied), {} director{}, {} symbolic link{}",
        args.src,
        args.dst,
        made.files,
        if made.files == 1 { "" } else { "s" },
        made.bytes,
        made.dirs,
        if made.dirs == 1 { "y" } else { "ies" },
        made.links,
        if made.links == 1 { "" } else { "s" }
    );
    for path in &made.skipped {
        println!("skipped {path}: a device, pipe or socket");
    }
    Ok(())
}

/// Clones the entries of directory `from` (at `from_path`) into directory `to`, depth first.
async fn clone_tree(
    client: &Client,
    from: &Attr,
    from_path: &str,
    to: Ino,
    to_path: &str,
    made: &mut Made,
) -> Result<()> {
    let mut todo =
        vec![(from.ino, from_path.trim_end_matches('/').to_string(), to, to_path.trim_end_matches('/').to_string())];
    while let Some((src_dir, src_path, dst_dir, dst_path)) = todo.pop() {
        for entry in client.readdir(src_dir).await.map_err(|e| anyhow!("cannot list {src_path}: {e}"))? {
            let (src, dst) = (format!("{src_path}/{}", entry.name), format!("{dst_path}/{}", entry.name));
            let failed = |e: wire::WireError| anyhow!("cannot clone {src} to {dst}: {e}");
            match entry.attr.kind {
                FileKind::File => {
                    let attr = client.clone_file(entry.attr.ino, dst_dir, &entry.name).await.map_err(failed)?;
                    made.files += 1;
                    made.bytes += attr.size;
                }
                FileKind::Dir => {
                    let dir = client.mkdir(dst_dir, &entry.name, entry.attr.mode & 0o7777).await.map_err(failed)?;
                    made.dirs += 1;
                    todo.push((entry.attr.ino, src, dir.ino, dst));
                }
                FileKind::Symlink => {
                    let target = client.readlink(entry.attr.ino).await.map_err(failed)?;
                    client.symlink(dst_dir, &entry.name, &target).await.map_err(failed)?;
                    made.links += 1;
                }
                _ => made.skipped.push(src),
            }
        }
    }
    Ok(())
}
