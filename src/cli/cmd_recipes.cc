// cli/cmd_recipes.cc — `mxtrain recipes [--json]`: the registered recipes and their settings.
//
// Straight from the registry in core/recipe.cc (recipe.h), in registration order, with the
// copy each (role, use) reads (copies_needed, qtensor.h); the JSON
// comes from recipes_json() (mxtrain/info.h), which the Python module's recipes() also uses.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "mxtrain/info.h"
#include "mxtrain/qtensor.h"
#include "mxtrain/recipe.h"

namespace {

using namespace mxtrain;

int run_recipes(bool json) {
  if (json) {
    std::cout << recipes_json(1) << std::endl;
    return 0;
  }
  for (const Recipe& r : registered_recipes()) {
    std::cout << r.describe() << "\n  copies read:";
    for (Role role : {Role::input, Role::weight, Role::grad})
      for (Use u : {Use::forward, Use::dgrad, Use::wgrad}) {
        const CopySet c = copies_needed(r, role, u);
        if (!c.empty()) std::cout << " " << role_name(role) << "/" << use_name(u) << " " << c.name();
      }
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

MXT_REGISTER_COMMAND("recipes", [](CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("recipes", "List the registered recipes and their settings");
  sub->add_flag("--json", *json, "Print one JSON array instead of text");
  sub->callback([json] { mxtrain::cli::exit_code() = run_recipes(*json); });
});
