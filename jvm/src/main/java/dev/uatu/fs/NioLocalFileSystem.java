package dev.uatu.fs;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed local file system ({@code fs.file.impl}) over {@link
 * NioRawLocalFileSystem}: the {@code FileSystem} API of {@code file:} paths without a process
 * forked per file.
 */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
