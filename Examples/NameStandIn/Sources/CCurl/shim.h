/* A stand-in C module named CCurl: declares one constant, links nothing. */
static const int CCurl_stand_in = 1;
