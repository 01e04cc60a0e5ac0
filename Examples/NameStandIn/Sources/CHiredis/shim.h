/* A stand-in C module named CHiredis: declares one constant, links nothing. */
static const int CHiredis_stand_in = 1;
