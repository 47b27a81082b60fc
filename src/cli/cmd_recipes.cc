// cli/cmd_recipes.cc — `mxtrain recipes [--json]`: the registered recipes and their settings.
//
// Straight from the registry in core/recipe.cc (recipe.h), in registration order.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "mxtrain/recipe.h"

namespace {

using namespace mxtrain;

nlohmann::json recipe_json(const Recipe& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["quantized"] = r.quantized();
  j["scaling_type"] = r.quantized() ? "mx" : "none";
  j["block_size"] = r.granularity.block_size;
  if (r.quantized()) {
    j["strategy"] = r.strategy;
    j["weight_layout"] = r.weight_tiled() ? "tile32 (one copy)" : "rowwise + colwise 1x32";
    j["input_elem"] = elem_name(r.input_elem);
    j["weight_elem"] = elem_name(r.weight_elem);
    j["grad_elem"] = elem_name(r.grad_elem);
    j["scale_rounding"] = rounding_name(r.rounding);
  }
  j["description"] = r.describe();
  return j;
}

int run_recipes(bool json) {
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& n : recipe_names()) all.push_back(recipe_json(get_recipe(n)));
  if (json) {
    std::cout << all.dump(1) << std::endl;
    return 0;
  }
  for (const std::string& n : recipe_names()) std::cout << get_recipe(n).describe() << "\n";
  return 0;
}

}  // namespace

MXT_REGISTER_COMMAND("recipes", [](CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("recipes", "List the registered recipes and their settings");
  sub->add_flag("--json", *json, "Print one JSON array instead of text");
  sub->callback([json] { mxtrain::cli::exit_code() = run_recipes(*json); });
});
