// enclave-broker's data-use policy verbs (docs/formats/data-use-policy.md): `policy keygen`,
// `policy sign`, `policy verify`. The compliance officer's side: they touch no broker state.
// (`policy activate` goes through the broker's admin API, elsewhere.)
#pragma once

#include <vector>

#include "cli.h"

namespace enclave {

std::vector<cli::Verb> PolicyVerbs();

}  // namespace enclave
