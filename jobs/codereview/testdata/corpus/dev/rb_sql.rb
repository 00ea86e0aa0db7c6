class UsersController < ApplicationController
  def search
    @users = User.where("name = '#{params[:name]}'") # want: sql-injection
  end

  def destroy_all_for(id)
    ActiveRecord::Base.connection.execute("DELETE FROM users WHERE account_id = #{id}") # want: sql-injection
  end
end
