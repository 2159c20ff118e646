/* Each rank prints one line: rank, size, an allreduce of the ranks (proves
 * the ranks really talk to each other) and the MPI library it runs on. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, sum = 0, len;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Get_library_version(lib, &len);
    for (int i = 0; i < len; i++)
        if (lib[i] == '\n' || lib[i] == '\t') lib[i] = ' ';
    printf("MPI_HELLO rank=%d size=%d sum=%d lib=%.40s\n", rank, size, sum, lib);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
