/* inf_version: what this build is. The Makefile takes both from git at build
 * time (engine/version.c alone is rebuilt when they change); a build without
 * git (a tarball, the Docker context) falls back to INFERD_VERSION in
 * engine/common.h and "unknown". */
#ifndef INFERD_VERSION_H
#define INFERD_VERSION_H

/* The release, "0.1.0": the latest vX.Y.Z tag, else INFERD_VERSION. The man
 * page's .TH line names it (tests/check-manpage.sh). */
const char *inf_version(void);

/* `git describe --tags --always --dirty` of the tree built ("0.1.0-4-g1a2b3c4",
 * "76d859b-dirty"), or "unknown". */
const char *inf_version_build(void);

#endif
