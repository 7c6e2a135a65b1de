/* The download command: `inferd download ORG/NAME [--revision REV]`. */
#ifndef INFERD_DOWNLOAD_H
#define INFERD_DOWNLOAD_H

/* argv excludes "download"; returns the process exit status. */
int download_main(int argc, char **argv);

#endif
