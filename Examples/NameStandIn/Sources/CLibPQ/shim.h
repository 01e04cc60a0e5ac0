/* A stand-in C module named CLibPQ: declares one constant, links nothing. */
static const int CLibPQ_stand_in = 1;
