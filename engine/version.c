#include "version.h"

#include "common.h"

#ifndef INFERD_GIT_VERSION
#define INFERD_GIT_VERSION INFERD_VERSION
#endif
#ifndef INFERD_GIT_DESCRIBE
#define INFERD_GIT_DESCRIBE "unknown"
#endif

const char *inf_version(void) { return INFERD_GIT_VERSION; }

const char *inf_version_build(void) { return INFERD_GIT_DESCRIBE; }
