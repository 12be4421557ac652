"""dev.uatu.fs.NioLocalFs, the FileContext file system of `file:` paths in every session
(jobs.runtime.session.BASE_CONF): streaming checkpoints and Delta's log are written through it.
Its point is to fork no chmod or readlink (docs/benchmarks.md measures that); these tests hold
that it leaves on disk what Hadoop's own LocalFs leaves (the same permission bits, checksum
files and renames) and answers the same link status. Each test does the same operation
through both and compares, and against the bits POSIX gives."""

from __future__ import annotations

import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

HADOOP_LOCAL_FS = "org.apache.hadoop.fs.local.LocalFs"
UMASK = 0o022  # Hadoop's fs.permissions.umask-mode default


@pytest.fixture
def contexts(spark):
    """(ours, Hadoop's): FileContexts of file: paths, the session's and one on Hadoop's LocalFs."""
    jvm = spark._jvm
    session_conf = spark._jsc.hadoopConfiguration()
    hadoop_conf = jvm.org.apache.hadoop.conf.Configuration(session_conf)
    hadoop_conf.set("fs.AbstractFileSystem.file.impl", HADOOP_LOCAL_FS)
    uri = jvm.java.net.URI("file:///")
    get = jvm.org.apache.hadoop.fs.FileContext.getFileContext
    return get(uri, session_conf), get(uri, hadoop_conf)


def hadoop_path(spark, path: Path):
    return spark._jvm.org.apache.hadoop.fs.Path(path.as_uri())


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def create(spark, context, path: Path, permission: int, data: bytes) -> None:
    """FileContext.create(path, CREATE|OVERWRITE, perms(permission)), writing `data`."""
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs
    flags = jvm.java.util.EnumSet.of(fs.CreateFlag.CREATE, fs.CreateFlag.OVERWRITE)
    opts = spark.sparkContext._gateway.new_array(fs.Options.CreateOpts, 1)
    opts[0] = fs.Options.CreateOpts.perms(fs.permission.FsPermission(permission))
    out = context.create(hadoop_path(spark, path), flags, opts)
    out.write(bytearray(data))
    out.close()


def rename_over(spark, context, src: Path, dst: Path) -> None:
    rename = spark._jvm.org.apache.hadoop.fs.Options.Rename
    opts = spark.sparkContext._gateway.new_array(rename, 1)
    opts[0] = rename.OVERWRITE
    context.rename(hadoop_path(spark, src), hadoop_path(spark, dst), opts)


def test_every_session_uses_it_for_file_paths(spark, contexts):
    ours, hadoops = contexts
    assert ours.getDefaultFileSystem().getClass().getName() == "dev.uatu.fs.NioLocalFs"
    assert hadoops.getDefaultFileSystem().getClass().getName() == HADOOP_LOCAL_FS


@pytest.mark.parametrize("permission", [0o644, 0o640, 0o600, 0o755, 0o777, 0o000])
def test_files_and_folders_get_hadoops_bits(spark, contexts, tmp_path, permission):
    expected = permission & ~UMASK
    made = {}
    for name, context in zip(("ours", "hadoop"), contexts, strict=True):
        folder, file = tmp_path / name / "folder", tmp_path / name / "file"
        context.mkdir(
            hadoop_path(spark, folder),
            spark._jvm.org.apache.hadoop.fs.permission.FsPermission(permission),
            True,
        )
        create(spark, context, file, permission, b"x")
        made[name] = (mode(folder), mode(file), sorted(os.listdir(tmp_path / name)))
    assert made["ours"] == made["hadoop"] == (expected, expected, [".file.crc", "file", "folder"])


def test_a_sticky_bit_set_on_a_folder_is_kept(spark, contexts, tmp_path):
    """java.nio cannot set the sticky bit: that permission still goes through Hadoop. (A
    FileContext's mkdir drops it with the umask, in Hadoop's LocalFs too; setPermission does
    not.)"""
    fs_permission = spark._jvm.org.apache.hadoop.fs.permission.FsPermission
    for name, context in zip(("ours", "hadoop"), contexts, strict=True):
        folder = hadoop_path(spark, tmp_path / name)
        context.mkdir(folder, fs_permission(0o1777), True)
        assert mode(tmp_path / name) == 0o755
        context.setPermission(folder, fs_permission(0o1777))
    assert mode(tmp_path / "ours") == mode(tmp_path / "hadoop") == 0o1777


def test_a_rename_over_a_file_replaces_it_with_its_checksum(spark, contexts, tmp_path):
    for name, context in zip(("ours", "hadoop"), contexts, strict=True):
        folder = tmp_path / name
        folder.mkdir()
        create(spark, context, folder / "0", 0o644, b"old")
        create(spark, context, folder / ".0.tmp", 0o644, b"new!")
        rename_over(spark, context, folder / ".0.tmp", folder / "0")
        assert (folder / "0").read_bytes() == b"new!"
        assert sorted(os.listdir(folder)) == [".0.crc", "0"]
    assert (tmp_path / "ours" / ".0.crc").read_bytes() == (
        tmp_path / "hadoop" / ".0.crc"
    ).read_bytes()


def test_link_status_of_a_link_a_file_and_nothing(spark, contexts, tmp_path):
    """A FileContext over a checksummed local file system answers a link's status with its
    target's (isSymlink false), in Hadoop's LocalFs as here; a missing path raises."""
    (tmp_path / "target").write_bytes(b"t")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    answers = []
    for context in contexts:
        statuses = [
            context.getFileLinkStatus(hadoop_path(spark, tmp_path / name))
            for name in ("link", "target")
        ]
        with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
            context.getFileLinkStatus(hadoop_path(spark, tmp_path / "missing"))
        answers.append(
            [
                (s.isSymlink(), s.isFile(), s.getLen(), s.getPath().toUri().getPath())
                for s in statuses
            ]
        )
    link, target = str(tmp_path / "link"), str(tmp_path / "target")
    assert answers[0] == answers[1] == [(False, True, 1, link), (False, True, 1, target)]


def read(spark, context, path: Path) -> bytes:
    """The file's bytes through `context`, its checksum verified."""
    stream = context.open(hadoop_path(spark, path))
    try:
        return bytes(spark._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def rename_at_once(spark, context, sources: list[Path], target: Path) -> list[int]:
    """Each of `sources` renamed onto `target` without replacing, from threads of its own
    released together; the indexes of the renames that succeeded."""
    rename = spark._jvm.org.apache.hadoop.fs.Options.Rename
    start = threading.Barrier(len(sources))

    def commit(source: Path) -> bool:
        opts = spark.sparkContext._gateway.new_array(rename, 1)
        opts[0] = rename.NONE
        start.wait()
        try:
            context.rename(hadoop_path(spark, source), hadoop_path(spark, target), opts)
            return True
        except Py4JJavaError as e:
            assert "FileAlreadyExistsException" in str(e.java_exception), e
            return False

    with ThreadPoolExecutor(len(sources)) as pool:
        return [w for w, ok in enumerate(pool.map(commit, sources)) if ok]


def racing_renames(spark, context, folder: Path, rounds: int, writers: int) -> list[str]:
    """`writers` files renamed onto one name at once (`rename_at_once`), `rounds` times: what
    Delta's commits of one version from several applications do. The rounds where more than
    one rename succeeded, or where the file left does not read as its winner's, its checksum
    verified."""
    wrong = []
    for n in range(rounds):
        target = folder / f"{n:05d}.json"
        sources = [folder / f".{n:05d}.json.{w}.tmp" for w in range(writers)]
        for w, source in enumerate(sources):
            create(spark, context, source, 0o644, f"writer {w} commits {n}".encode())
        won = rename_at_once(spark, context, sources, target)
        try:
            text = read(spark, context, target).decode()
        except Py4JJavaError as e:
            text = type(e.java_exception).__name__ + ": " + str(e.java_exception.getMessage())
        if len(won) != 1 or text != f"writer {won[0]} commits {n}":
            wrong.append(f"round {n}: renamed by {won}, reads {text!r}")
    return wrong


def test_a_rename_that_must_not_replace_lets_exactly_one_of_racing_writers_win(
    spark, contexts, tmp_path
):
    """Two applications committing the same Delta version rename onto one name without
    replacing: exactly one succeeds, and the file left is its, with its own checksum. Hadoop's
    LocalFs looks, then renames: run against it (`contexts[1]`), this finds rounds where two
    writers both succeeded, the file the later one's and the checksum the other's."""
    ours, _ = contexts
    assert racing_renames(spark, ours, tmp_path, rounds=40, writers=6) == []
