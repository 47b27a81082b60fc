// cli/cmd_recipes.cc — `mxtrain recipes [--json]`: the registered recipes and their settings.
//
// Straight from the registry in core/recipe.cc (recipe.h), in registration order; the JSON
// comes from recipes_json() (mxtrain/info.h), which the Python module's recipes() also uses.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "mxtrain/info.h"
#include "mxtrain/recipe.h"

namespace {

using namespace mxtrain;

int run_recipes(bool json) {
  if (json) {
    std::cout << recipes_json(1) << std::endl;
    return 0;
  }
  for (const Recipe& r : registered_recipes()) std::cout << r.describe() << "\n";
  return 0;
}

}  // namespace

MXT_REGISTER_COMMAND("recipes", [](CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("recipes", "List the registered recipes and their settings");
  sub->add_flag("--json", *json, "Print one JSON array instead of text");
  sub->callback([json] { mxtrain::cli::exit_code() = run_recipes(*json); });
});
