"""jobs.runtime.checkpoint_files.HadoopFiles on the driver's local file system: which locations
it takes there (`local_path`, pure), and that what it leaves on disk reads the same through
Hadoop's own checksummed local file system, the one Spark, Delta and older runs of the jobs
use, and the other way round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.runtime.checkpoint_files import HadoopFiles, local_path

LOCAL_DEFAULT = "file:///"


@pytest.mark.parametrize(
    ("location", "default_fs", "expected"),
    [
        ("/ck/a/pack.json", LOCAL_DEFAULT, "/ck/a/pack.json"),
        ("file:/ck/a", "hdfs://nn:8020", "/ck/a"),
        ("file:///ck/a", "hdfs://nn:8020", "/ck/a"),
        ("file://localhost/ck/a", LOCAL_DEFAULT, None),  # a host: Hadoop's to resolve
        ("/ck/a", "hdfs://nn:8020", None),  # the session's default is another file system
        ("hdfs://nn:8020/ck/a", LOCAL_DEFAULT, None),
        ("s3a://bucket/ck/a", LOCAL_DEFAULT, None),
        ("/ck/a:b/c", LOCAL_DEFAULT, "/ck/a:b/c"),  # a colon in a path is not a scheme
    ],
)
def test_only_the_drivers_local_file_system_is_taken_locally(location, default_fs, expected):
    assert local_path(location, default_fs) == expected


@pytest.mark.spark
def test_a_file_hadoop_wrote_is_replaced_and_read_the_same_through_hadoop(spark, tmp_path):
    """A file Hadoop's checksummed file system wrote (with its `.crc`) and this class then
    replaced: Hadoop reads the new text, which it could not with the old checksum beside it,
    and lists what this class lists; a file this class wrote, Hadoop reads as written."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop_path = spark._jvm.org.apache.hadoop.fs.Path
    checksummed = hadoop_path(tmp_path.as_uri()).getFileSystem(conf)
    assert "LocalFileSystem" in checksummed.getClass().getName()

    def hadoop_write(path: Path, text: str) -> None:
        out = checksummed.create(hadoop_path(str(path)), True)
        out.write(text.encode())
        out.close()

    def hadoop_read(path: Path) -> str:
        stream = checksummed.open(hadoop_path(str(path)))
        try:
            return str(spark._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    files, folder = HadoopFiles(spark), tmp_path / "gen"
    hadoop_write(folder / "pack.json", '{"members": ["old and longer than the new"]}')
    assert (folder / ".pack.json.crc").exists()

    files.write_json(str(folder / "pack.json"), {"members": ["a"]})
    files.write_json(str(folder / "7"), {"n": 7})
    assert json.loads(hadoop_read(folder / "pack.json")) == {"members": ["a"]}
    assert json.loads(hadoop_read(folder / "7")) == {"n": 7}
    assert files.read_text(str(folder / "7")) == '{"n": 7}'
    listed = {str(s.getPath().getName()) for s in checksummed.listStatus(hadoop_path(str(folder)))}
    assert sorted(files.names(str(folder))) == sorted(listed) == ["7", "pack.json"]
    assert files.numbers(str(folder)) == [7]

    hadoop_write(folder / "8", "{}")
    files.delete(str(folder / "8"))
    assert sorted(p.name for p in folder.iterdir()) == ["7", "pack.json"]  # no .crc left
    files.delete(str(folder), recursive=True)
    assert not folder.exists() and not files.exists(str(folder))
    assert files.names(str(folder)) == [] and files.read_text(str(folder / "7")) is None
