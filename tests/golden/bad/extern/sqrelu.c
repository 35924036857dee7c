/* Stands in for the op's CPU source: the golden tests only check that it exists. */
#include "good.h"
